#ifndef SIGNET_SHIMS_H
#define SIGNET_SHIMS_H

// One C function per thing Swift cannot call directly. Each says why it exists.

#include <stddef.h>
#include <openssl/types.h>
#include <openssl/x509.h>
// <sys/xattr.h> is not part of Swift's Glibc module; importing it here gives Signet
// fgetxattr/fsetxattr/fremovexattr/flistxattr.
#include <sys/xattr.h>
#include <spawn.h>

/// BIO_get_mem_data is a macro over BIO_ctrl.
long signet_BIO_get_mem_data(BIO *bio, char **data);

/// OPENSSL_free is a macro that passes __FILE__ and __LINE__ to CRYPTO_free.
void signet_OPENSSL_free(void *pointer);

/// The DNS and IP entries of a certificate's subjectAltName (sk_GENERAL_NAME_* are macros):
/// their number, or -1 when it has no subjectAltName extension.
int signet_x509_san_names(X509 *certificate);
/// sk_X509_* are type-safe macros over OPENSSL_sk_*.
int signet_sk_X509_num(const STACK_OF(X509) *stack);
/// sk_X509_value is a macro over OPENSSL_sk_value.
X509 *signet_sk_X509_value(const STACK_OF(X509) *stack, int index);
/// sk_X509_pop_free is a macro that needs a typed free function pointer.
void signet_sk_X509_pop_free(STACK_OF(X509) *stack);

/// sk_X509_new_null is a type-safe macro over OPENSSL_sk_new_null.
STACK_OF(X509) *signet_sk_X509_new_null(void);
/// sk_X509_push is a type-safe macro over OPENSSL_sk_push.
int signet_sk_X509_push(STACK_OF(X509) *stack, X509 *certificate);

/// XN_FLAG_RFC2253 is a compound macro of several flags Swift cannot import.
unsigned long signet_XN_FLAG_RFC2253(void);

/// EVP_RSA_gen is a macro over the variadic EVP_PKEY_Q_keygen.
EVP_PKEY *signet_EVP_RSA_gen(unsigned int bits);
/* EVP_PKEY_PUBLIC_KEY (a selection macro) for EVP_PKEY_fromdata. */
int signet_EVP_PKEY_PUBLIC_KEY(void);

/// ERR_GET_LIB / ERR_GET_REASON are inline bit operations whose availability as
/// functions differs between OpenSSL 3 minor versions.
int signet_ERR_GET_LIB(unsigned long code);
int signet_ERR_GET_REASON(unsigned long code);

/// renameat2 is declared by glibc only under _GNU_SOURCE, which Swift's Glibc module does not set.
/// Returns -1 with errno set like renameat2(2).
int signet_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags);

/// sync_file_range is declared only under _GNU_SOURCE. Starts writeback of a range
/// (SYNC_FILE_RANGE_WRITE) without waiting for it.
int signet_start_writeback(int fd, long long offset, long long length);

/// syncfs(2) is declared only under _GNU_SOURCE. Writes back everything dirty on the filesystem
/// that holds `fd` and waits for it (journal commit included); -1 with errno on failure,
/// including writeback errors since `fd` was opened (Linux 5.8 and later).
int signet_syncfs(int fd);

/// memfd_create(2) is declared only under _GNU_SOURCE. An anonymous memory file, close-on-exec;
/// -1 with errno on failure.
int signet_memfd(const char *name);

/// posix_spawn_file_actions_addclosefrom_np (glibc 2.34) is declared only under _GNU_SOURCE.
/// Adds an action that closes every descriptor from `from` up in the child.
int signet_spawn_closefrom(posix_spawn_file_actions_t *actions, int from);

/// ioctl(FICLONE): makes `destination` share `source`'s data extents (a reflink, on btrfs, XFS
/// with reflink, bcachefs...). -1 with errno (EOPNOTSUPP, EXDEV, EINVAL) where it cannot.
int signet_clone_file(int destination, int source);

/// openat2(2) has no glibc wrapper. Opens `path` below `dirfd` in one call, refusing symbolic
/// links anywhere on the path (ELOOP) and any escape from `dirfd` (RESOLVE_BENEATH).
/// -1 with errno ENOSYS where the kernel (or a seccomp filter) does not offer openat2.
int signet_open_beneath(int dirfd, const char *path, int flags);

/// RENAME_NOREPLACE / RENAME_EXCHANGE are _GNU_SOURCE macros.
unsigned int signet_RENAME_NOREPLACE(void);
unsigned int signet_RENAME_EXCHANGE(void);

/// O_PATH is a _GNU_SOURCE macro: a descriptor that only names a directory (search permission
/// is enough), for the *at calls.
int signet_O_PATH(void);

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

/// zlib's deflateInit2 is a macro (it passes the library version and the stream size): the
/// size of `data` deflated raw (no zlib header, as zip stores it) at `level` with libzip's
/// parameters, or -1 if zlib fails. For deciding whether a small file is worth deflating.
long signet_raw_deflate_size(const unsigned char *data, size_t size, int level);

/// A raw inflater (inflateInit2 is a macro), so that a zip entry's deflate stream is inflated
/// where Signet sees where it ends: bytes after the stream's end inside an entry are refused.
typedef struct signet_inflater signet_inflater;
signet_inflater *signet_inflater_new(void);
void signet_inflater_free(signet_inflater *inflater);
/// Inflates from `in` into `out`: 1 at the stream's end, 0 when it needs more input or output
/// room, -1 for data that is not deflate. `consumed` and `produced` say how much was used.
int signet_inflate(signet_inflater *inflater, const unsigned char *in, size_t in_size, size_t *consumed,
                   unsigned char *out, size_t out_size, size_t *produced);
/// zlib's crc32 over any length (its length argument is 32 bits).
unsigned long signet_crc32(unsigned long crc, const unsigned char *data, size_t size);

/// <sys/vfs.h> is not part of Swift's Glibc module: statfs's f_type of the filesystem holding
/// `path` (0x4d44 vfat, ...), or -1 with errno set.
long long signet_filesystem_type(const char *path);

#endif
