#ifndef CSIGNETCURL_H
#define CSIGNETCURL_H

// libcurl, loaded with dlopen on first use, for the network layer only.
// One C function per thing Swift cannot call directly. Each says why it exists.

#include <stddef.h>

// libcurl: curl_easy_setopt and curl_easy_getinfo are variadic, which Swift cannot call.
#include <curl/curl.h>

/// libcurl is loaded on first use (dlopen of libcurl.so.4, then curl_global_init), not linked.
/// 1 when it is ready; otherwise signet_curl_load_error says why (NULL once loaded).
int signet_curl_load(void);
const char *signet_curl_load_error(void);
/// The libcurl functions Signet calls, through the loaded library (NULL / CURLE_FAILED_INIT
/// when it could not be loaded).
CURL *signet_curl_easy_init(void);
CURLcode signet_curl_easy_perform(CURL *handle);
void signet_curl_easy_cleanup(CURL *handle);
const char *signet_curl_easy_strerror(CURLcode code);
struct curl_slist *signet_curl_slist_append(struct curl_slist *list, const char *text);
void signet_curl_slist_free_all(struct curl_slist *list);
const char *signet_curl_version(void);

/// curl_easy_setopt for a long, a curl_off_t, a string or other pointer, and the callbacks Signet sets.
CURLcode signet_curl_setopt_long(CURL *handle, CURLoption option, long value);
CURLcode signet_curl_setopt_off(CURL *handle, CURLoption option, curl_off_t value);
CURLcode signet_curl_setopt_pointer(CURL *handle, CURLoption option, void *value);
CURLcode signet_curl_setopt_string(CURL *handle, CURLoption option, const char *value);
typedef size_t (*signet_curl_data_callback)(char *data, size_t size, size_t count, void *context);
CURLcode signet_curl_setopt_data_callback(CURL *handle, CURLoption option, signet_curl_data_callback callback);
typedef CURLcode (*signet_curl_ssl_ctx_callback)(CURL *handle, void *ssl_ctx, void *context);
CURLcode signet_curl_setopt_ssl_ctx_callback(CURL *handle, signet_curl_ssl_ctx_callback callback);
typedef int (*signet_curl_progress_callback)(void *context, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow);
CURLcode signet_curl_setopt_progress_callback(CURL *handle, signet_curl_progress_callback callback);
/// curl_easy_getinfo for a long, a curl_off_t and a string.
CURLcode signet_curl_getinfo_long(CURL *handle, CURLINFO info, long *value);
CURLcode signet_curl_getinfo_off(CURL *handle, CURLINFO info, curl_off_t *value);
CURLcode signet_curl_getinfo_string(CURL *handle, CURLINFO info, char **value);

#endif
