#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <dlfcn.h>
#include <pthread.h>
#include "CSignetCurl.h"

// libcurl is loaded on first use, with dlopen, not linked: it and the ~25 libraries it
// depends on (nghttp2, ssh2, ldap, krb5, gnutls through rtmp, ...) cost every command about
// 7 ms of start-up, and only downloads need it (bench/README.md). Every function below loads
// it once (pthread_once) and fails cleanly (CURLE_FAILED_INIT, NULL) where it could not be.
static struct {
    CURLcode (*global_init)(long);
    CURL *(*easy_init)(void);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    CURLcode (*easy_perform)(CURL *);
    void (*easy_cleanup)(CURL *);
    const char *(*easy_strerror)(CURLcode);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
    char *(*version)(void);
} signet_curl;
static pthread_once_t signet_curl_once = PTHREAD_ONCE_INIT;
static int signet_curl_loaded = 0;
static char signet_curl_error[512];

static void signet_curl_open(void) {
    void *library = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        const char *reason = dlerror();
        snprintf(signet_curl_error, sizeof signet_curl_error, "%s", reason ? reason : "libcurl.so.4 not found");
        return;
    }
#define SIGNET_CURL_SYMBOL(field, name) \
    *(void **)&signet_curl.field = dlsym(library, name); \
    if (signet_curl.field == NULL) { \
        snprintf(signet_curl_error, sizeof signet_curl_error, "libcurl.so.4 has no %s", name); \
        return; \
    }
    SIGNET_CURL_SYMBOL(global_init, "curl_global_init")
    SIGNET_CURL_SYMBOL(easy_init, "curl_easy_init")
    SIGNET_CURL_SYMBOL(easy_setopt, "curl_easy_setopt")
    SIGNET_CURL_SYMBOL(easy_getinfo, "curl_easy_getinfo")
    SIGNET_CURL_SYMBOL(easy_perform, "curl_easy_perform")
    SIGNET_CURL_SYMBOL(easy_cleanup, "curl_easy_cleanup")
    SIGNET_CURL_SYMBOL(easy_strerror, "curl_easy_strerror")
    SIGNET_CURL_SYMBOL(slist_append, "curl_slist_append")
    SIGNET_CURL_SYMBOL(slist_free_all, "curl_slist_free_all")
    SIGNET_CURL_SYMBOL(version, "curl_version")
#undef SIGNET_CURL_SYMBOL
    // The library is kept for the life of the process (never dlclose'd).
    if (signet_curl.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(signet_curl_error, sizeof signet_curl_error, "curl_global_init failed");
        return;
    }
    signet_curl_loaded = 1;
}

int signet_curl_load(void) {
    pthread_once(&signet_curl_once, signet_curl_open);
    return signet_curl_loaded;
}

const char *signet_curl_load_error(void) {
    signet_curl_load();
    return signet_curl_loaded ? NULL : signet_curl_error;
}

CURL *signet_curl_easy_init(void) {
    return signet_curl_load() ? signet_curl.easy_init() : NULL;
}

CURLcode signet_curl_easy_perform(CURL *handle) {
    return signet_curl_load() ? signet_curl.easy_perform(handle) : CURLE_FAILED_INIT;
}

void signet_curl_easy_cleanup(CURL *handle) {
    if (handle != NULL && signet_curl_load()) signet_curl.easy_cleanup(handle);
}

const char *signet_curl_easy_strerror(CURLcode code) {
    return signet_curl_load() ? signet_curl.easy_strerror(code) : "libcurl could not be loaded";
}

struct curl_slist *signet_curl_slist_append(struct curl_slist *list, const char *text) {
    return signet_curl_load() ? signet_curl.slist_append(list, text) : NULL;
}

void signet_curl_slist_free_all(struct curl_slist *list) {
    if (list != NULL && signet_curl_load()) signet_curl.slist_free_all(list);
}

const char *signet_curl_version(void) {
    return signet_curl_load() ? signet_curl.version() : "not loaded";
}

#define SIGNET_CURL_SETOPT(handle, option, value) \
    (signet_curl_load() ? signet_curl.easy_setopt(handle, option, value) : CURLE_FAILED_INIT)
#define SIGNET_CURL_GETINFO(handle, info, value) \
    (signet_curl_load() ? signet_curl.easy_getinfo(handle, info, value) : CURLE_FAILED_INIT)

CURLcode signet_curl_setopt_long(CURL *handle, CURLoption option, long value) {
    return SIGNET_CURL_SETOPT(handle, option, value);
}

CURLcode signet_curl_setopt_off(CURL *handle, CURLoption option, curl_off_t value) {
    return SIGNET_CURL_SETOPT(handle, option, value);
}

CURLcode signet_curl_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    return SIGNET_CURL_SETOPT(handle, option, value);
}

CURLcode signet_curl_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return SIGNET_CURL_SETOPT(handle, option, value);
}

CURLcode signet_curl_setopt_data_callback(CURL *handle, CURLoption option, signet_curl_data_callback callback) {
    return SIGNET_CURL_SETOPT(handle, option, callback);
}

CURLcode signet_curl_setopt_ssl_ctx_callback(CURL *handle, signet_curl_ssl_ctx_callback callback) {
    return SIGNET_CURL_SETOPT(handle, CURLOPT_SSL_CTX_FUNCTION, callback);
}

CURLcode signet_curl_setopt_progress_callback(CURL *handle, signet_curl_progress_callback callback) {
    return SIGNET_CURL_SETOPT(handle, CURLOPT_XFERINFOFUNCTION, callback);
}

CURLcode signet_curl_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return SIGNET_CURL_GETINFO(handle, info, value);
}

CURLcode signet_curl_getinfo_off(CURL *handle, CURLINFO info, curl_off_t *value) {
    return SIGNET_CURL_GETINFO(handle, info, value);
}

CURLcode signet_curl_getinfo_string(CURL *handle, CURLINFO info, char **value) {
    return SIGNET_CURL_GETINFO(handle, info, value);
}
