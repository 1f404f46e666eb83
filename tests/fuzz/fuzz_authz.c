/* libFuzzer driver: the API server's TokenReview and SubjectAccessReview answers, as the
 * collector's --auth kubernetes parses them (mv_authz_json.c). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mv_authz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256], reason[MV_AUTHZ_REASON_MAX];
    mv_authz_user u;
    if (mv_authz_parse_token_review((const char *)data, size, &u, err, sizeof err) == 0) {
        if (u.authenticated) {
            if (!u.username || !u.username[0] || strlen(u.username) > MV_AUTHZ_NAME_MAX ||
                u.ngroups > MV_AUTHZ_GROUPS_MAX)
                __builtin_trap();
            char *body = mv_authz_access_review_body(&u, "/metrics", "get");
            if (!body)
                __builtin_trap();
            free(body);
        }
        if (strlen(u.error) >= sizeof u.error)
            __builtin_trap();
        mv_authz_user_clear(&u);
    } else if (u.username || u.groups) {
        __builtin_trap(); /* cleared on error */
    }
    int allowed = -1;
    if (mv_authz_parse_access_review((const char *)data, size, &allowed, reason, sizeof reason, err,
                                     sizeof err) == 0) {
        if ((allowed != 0 && allowed != 1) || strlen(reason) >= sizeof reason)
            __builtin_trap();
    } else if (allowed != 0) {
        __builtin_trap();
    }
    return 0;
}
