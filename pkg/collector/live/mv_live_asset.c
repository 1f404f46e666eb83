/* mv_live_asset: the page and its code, embedded at build time (mv_live_assets.c, generated
 * by cmake/embed.cmake from ui/index.html and ui/app.js). */
#include <string.h>

#include "mv_httpd.h"
#include "mv_live.h"

extern const unsigned char mv_live_ui_index_html[];
extern const unsigned long mv_live_ui_index_html_len;
extern const unsigned char mv_live_ui_app_js[];
extern const unsigned long mv_live_ui_app_js_len;

int mv_live_handle_asset(const char *path, mv_httpd_response *resp)
{
    const unsigned char *data;
    size_t len;
    const char *ct;
    if (!strcmp(path, "/ui")) {
        data = mv_live_ui_index_html;
        len = mv_live_ui_index_html_len;
        ct = "text/html; charset=utf-8";
    } else if (!strcmp(path, "/ui/app.js")) {
        data = mv_live_ui_app_js;
        len = mv_live_ui_app_js_len;
        ct = "text/javascript; charset=utf-8";
    } else {
        mv_httpd_set_status(resp, 404);
        return mv_httpd_copy_body(resp, "not found\n", 10);
    }
    mv_httpd_set_status(resp, 200);
    int rc = mv_httpd_set_content_type(resp, ct);
    if (!rc)
        rc = mv_httpd_add_header(resp, "Content-Security-Policy",
                                 "default-src 'self'; img-src 'self' data:; style-src 'self' "
                                 "'unsafe-inline'");
    if (!rc)
        rc = mv_httpd_add_header(resp, "X-Content-Type-Options", "nosniff");
    return rc ? rc : mv_httpd_copy_body(resp, data, len);
}
