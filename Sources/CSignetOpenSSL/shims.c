#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/kdf.h>
#include <openssl/core_names.h>
#include <openssl/params.h>
#include "CSignetOpenSSL.h"

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

int signet_EVP_PKEY_PUBLIC_KEY(void) { return EVP_PKEY_PUBLIC_KEY; }

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

int signet_hkdf_sha256_expand(const unsigned char *key, size_t key_length, const unsigned char *info, size_t info_length,
                              unsigned char *out, size_t out_length) {
    EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    if (kdf == NULL) return 0;
    EVP_KDF_CTX *context = EVP_KDF_CTX_new(kdf);
    EVP_KDF_free(kdf);
    if (context == NULL) return 0;
    int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
    OSSL_PARAM parameters[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, "SHA256", 0),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)key, key_length),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, (void *)info, info_length),
        OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
        OSSL_PARAM_construct_end(),
    };
    int ok = EVP_KDF_derive(context, out, out_length, parameters);
    EVP_KDF_CTX_free(context);
    return ok == 1;
}
