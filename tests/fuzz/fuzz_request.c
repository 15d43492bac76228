/* The server's request bodies, straight into the function that turns them
 * into generation parameters (srv_request_parse): byte 0 picks the API
 * (chat, completions, messages, apply-template), the rest is the body. */
#include "fuzz.h"
#include "server/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    srv_request r;
    srv_error e;
    srv_limits lim = {0};
    if (srv_request_parse((srv_api)(data[0] % 4), (const char *)data + 1, size - 1, &lim, &r, &e) == 0)
        srv_request_free(&r);
    return 0;
}
