/* The chat-template engine: arbitrary template text, then after a NUL
 * arbitrary message JSON, then after another NUL arbitrary extra variables.
 * The step and output limits are part of the design: a hostile template
 * must end (with an error) within them, never hang or exhaust memory. */
#include <time.h>

#include "chat/chat.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 3);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = buf[size + 1] = buf[size + 2] = 0;
    const char *tmpl = buf, *msgs = tmpl + strlen(tmpl) + 1;
    if (msgs > buf + size) msgs = buf + size + 1;
    const char *extra = msgs + strlen(msgs) + 1;
    if (extra > buf + size + 1) extra = buf + size + 2;
    chat_tmpl *t;
    sl_err err;
    if (chat_tmpl_parse(&t, tmpl, strlen(tmpl), &err) == 0) {
        struct tm now = {.tm_year = 125, .tm_mon = 0, .tm_mday = 2};
        chat_req r = {.messages_json = *msgs ? msgs : "[{\"role\":\"user\",\"content\":\"hi\"}]",
                      .extra_json = *extra ? extra : NULL, .add_generation_prompt = true,
                      .bos_token = "<s>", .eos_token = "</s>", .now = &now,
                      .max_output = 1 << 20, .max_steps = 200000};
        char *out = NULL;
        size_t len;
        if (chat_tmpl_render(t, &r, &out, &len, &err) == 0) {
            if (len > r.max_output) abort(); /* the output limit held */
            free(out);
        }
        chat_tmpl_free(t);
    }
    free(buf);
    return 0;
}
