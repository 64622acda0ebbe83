#ifndef CSIGNETOPENSSL_H
#define CSIGNETOPENSSL_H

// OpenSSL macros and inline functions, for every layer that uses libcrypto.
// One C function per thing Swift cannot call directly. Each says why it exists.

#include <stddef.h>
#include <openssl/types.h>
#include <openssl/x509.h>

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

/// HKDF-Expand with SHA-256 (EVP_KDF "HKDF", mode EXPAND_ONLY): OSSL_PARAM keeps pointers to
/// its parameter names, which Swift's bridged string literals do not keep alive. 1 on success.
int signet_hkdf_sha256_expand(const unsigned char *key, size_t key_length, const unsigned char *info, size_t info_length,
                              unsigned char *out, size_t out_length);

/// A decryption by a PKCS#11 token key: `length` bytes at `from` into `to` (room for
/// `capacity`), with OpenSSL's RSA padding number; returns the bytes written, or -1.
typedef int (*signet_token_decrypt_fn)(void *context, const unsigned char *from, int length, unsigned char *to, int capacity, int padding);
/// Releases the context a token key holds (called once, when OpenSSL frees the key).
typedef void (*signet_token_release_fn)(void *context);
/// An RSA key with `public_key`'s numbers whose private operation is `decrypt` (an RSA_METHOD,
/// which Swift cannot build: its callbacks take an RSA *). NULL on failure, when `release` is
/// not called.
EVP_PKEY *signet_token_rsa_key(const EVP_PKEY *public_key, void *context, signet_token_decrypt_fn decrypt, signet_token_release_fn release);
/// RSA_NO_PADDING and RSA_PKCS1_PADDING, as the token key's callback sees them.
int signet_RSA_NO_PADDING(void);
int signet_RSA_PKCS1_PADDING(void);

#endif
