#define _GNU_SOURCE
#include <stdio.h>
#include <fcntl.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <dlfcn.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <linux/openat2.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include "CSignetShims.h"

long signet_BIO_get_mem_data(BIO *bio, char **data) {
    return BIO_get_mem_data(bio, data);
}

void signet_OPENSSL_free(void *pointer) {
    OPENSSL_free(pointer);
}

int signet_sk_X509_num(const STACK_OF(X509) *stack) {
    return sk_X509_num(stack);
}

X509 *signet_sk_X509_value(const STACK_OF(X509) *stack, int index) {
    return sk_X509_value(stack, index);
}

void signet_sk_X509_pop_free(STACK_OF(X509) *stack) {
    sk_X509_pop_free(stack, X509_free);
}

STACK_OF(X509) *signet_sk_X509_new_null(void) {
    return sk_X509_new_null();
}

int signet_sk_X509_push(STACK_OF(X509) *stack, X509 *certificate) {
    return sk_X509_push(stack, certificate);
}

unsigned long signet_XN_FLAG_RFC2253(void) {
    return XN_FLAG_RFC2253;
}

EVP_PKEY *signet_EVP_RSA_gen(unsigned int bits) {
    return EVP_RSA_gen(bits);
}

int signet_ERR_GET_LIB(unsigned long code) {
    return ERR_GET_LIB(code);
}

int signet_ERR_GET_REASON(unsigned long code) {
    return ERR_GET_REASON(code);
}

int signet_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags) {
    return renameat2(olddirfd, oldpath, newdirfd, newpath, flags);
}

int signet_open_beneath(int dirfd, const char *path, int flags) {
#ifdef SYS_openat2
    struct open_how how;
    memset(&how, 0, sizeof how);
    how.flags = (unsigned long long)flags;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof how);
    // Container runtimes' seccomp filters answer EPERM for system calls they do not know.
    if (fd < 0 && errno == EPERM) errno = ENOSYS;
    return (int)fd;
#else
    (void)dirfd; (void)path; (void)flags;
    errno = ENOSYS;
    return -1;
#endif
}

int signet_start_writeback(int fd, long long offset, long long length) {
    return sync_file_range(fd, offset, length, SYNC_FILE_RANGE_WRITE);
}

int signet_syncfs(int fd) {
    return syncfs(fd);
}

int signet_memfd(const char *name) {
    return memfd_create(name, MFD_CLOEXEC);
}

int signet_spawn_closefrom(posix_spawn_file_actions_t *actions, int from) {
    return posix_spawn_file_actions_addclosefrom_np(actions, from);
}

int signet_clone_file(int destination, int source) {
    return ioctl(destination, FICLONE, source);
}

unsigned int signet_RENAME_NOREPLACE(void) { return RENAME_NOREPLACE; }
unsigned int signet_RENAME_EXCHANGE(void) { return RENAME_EXCHANGE; }

int signet_O_PATH(void) { return O_PATH; }

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

int signet_EVP_PKEY_PUBLIC_KEY(void) { return EVP_PKEY_PUBLIC_KEY; }

#include <string.h>
#include <stdlib.h>
#include <zlib.h>

long signet_raw_deflate_size(const unsigned char *data, size_t size, int level) {
    z_stream stream;
    memset(&stream, 0, sizeof stream);
    // libzip's own parameters: raw deflate (-MAX_WBITS), memLevel 9, default strategy.
    if (deflateInit2(&stream, level, Z_DEFLATED, -MAX_WBITS, 9, Z_DEFAULT_STRATEGY) != Z_OK) return -1;
    unsigned char out[4096];
    long total = 0;
    stream.next_in = (unsigned char *)data;
    stream.avail_in = (uInt)size;
    int result;
    do {
        stream.next_out = out;
        stream.avail_out = sizeof out;
        result = deflate(&stream, Z_FINISH);
        if (result == Z_STREAM_ERROR) {
            deflateEnd(&stream);
            return -1;
        }
        total += (long)(sizeof out - stream.avail_out);
    } while (result != Z_STREAM_END);
    deflateEnd(&stream);
    return total;
}

struct signet_inflater { z_stream stream; };

signet_inflater *signet_inflater_new(void) {
    signet_inflater *inflater = calloc(1, sizeof *inflater);
    if (!inflater) return NULL;
    if (inflateInit2(&inflater->stream, -MAX_WBITS) != Z_OK) {
        free(inflater);
        return NULL;
    }
    return inflater;
}

void signet_inflater_free(signet_inflater *inflater) {
    if (!inflater) return;
    inflateEnd(&inflater->stream);
    free(inflater);
}

int signet_inflate(signet_inflater *inflater, const unsigned char *in, size_t in_size, size_t *consumed,
                   unsigned char *out, size_t out_size, size_t *produced) {
    z_stream *stream = &inflater->stream;
    uInt in_chunk = in_size > 0x40000000 ? 0x40000000 : (uInt)in_size;
    uInt out_chunk = out_size > 0x40000000 ? 0x40000000 : (uInt)out_size;
    stream->next_in = (unsigned char *)in;
    stream->avail_in = in_chunk;
    stream->next_out = out;
    stream->avail_out = out_chunk;
    int result = inflate(stream, Z_NO_FLUSH);
    *consumed = in_chunk - stream->avail_in;
    *produced = out_chunk - stream->avail_out;
    if (result == Z_STREAM_END) return 1;
    if (result == Z_OK || result == Z_BUF_ERROR) return 0;
    return -1;
}

unsigned long signet_crc32(unsigned long crc, const unsigned char *data, size_t size) {
    while (size > 0) {
        uInt chunk = size > 0x40000000 ? 0x40000000 : (uInt)size;
        crc = crc32(crc, data, chunk);
        data += chunk;
        size -= chunk;
    }
    return crc;
}

#include <sys/vfs.h>

long long signet_filesystem_type(const char *path) {
    struct statfs info;
    if (statfs(path, &info) != 0) return -1;
    return (long long)info.f_type;
}

int signet_x509_san_names(X509 *certificate) {
    GENERAL_NAMES *names = X509_get_ext_d2i(certificate, NID_subject_alt_name, NULL, NULL);
    if (!names) return -1;
    int count = 0;
    for (int i = 0; i < sk_GENERAL_NAME_num(names); i++) {
        const GENERAL_NAME *name = sk_GENERAL_NAME_value(names, i);
        if (name->type == GEN_DNS || name->type == GEN_IPADD) count++;
    }
    GENERAL_NAMES_free(names);
    return count;
}
