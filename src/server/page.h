/* The web chat page (page.c). */
#ifndef SLUICE_SERVER_PAGE_H
#define SLUICE_SERVER_PAGE_H

extern const char srv_page_html[];

#endif
