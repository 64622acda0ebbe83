// An RSA key whose private operation happens on a PKCS#11 token, for OpenSSL's CMS decryption
// of an envelope sealed to a device key on a token (FORMAT.md §8). OpenSSL 3 reaches such a
// key only through a provider or an RSA_METHOD; the method is deprecated but supported, and it
// keeps the token code Signet's own (no provider to install). OpenSSL does the padding: for
// RSA-OAEP it asks the method for the raw RSA result (RSA_NO_PADDING) and checks the OAEP
// encoding itself; for PKCS#1 v1.5 it asks with that padding, which the token removes.
#define OPENSSL_SUPPRESS_DEPRECATED
#include <stdlib.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>
#include "CSignetOpenSSL.h"

struct signet_token_binding {
    void *context;
    signet_token_decrypt_fn decrypt;
    signet_token_release_fn release;
};

static int token_private_decrypt(int length, const unsigned char *from, unsigned char *to, RSA *rsa, int padding) {
    struct signet_token_binding *binding = RSA_get_app_data(rsa);
    if (binding == NULL) return -1;
    return binding->decrypt(binding->context, from, length, to, RSA_size(rsa), padding);
}

static int token_private_encrypt(int length, const unsigned char *from, unsigned char *to, RSA *rsa, int padding) {
    (void)length; (void)from; (void)to; (void)rsa; (void)padding;
    return -1; // a decryption key only: Signet signs on a token through its own code
}

static int token_finish(RSA *rsa) {
    struct signet_token_binding *binding = RSA_get_app_data(rsa);
    if (binding != NULL) {
        binding->release(binding->context);
        free(binding);
        RSA_set_app_data(rsa, NULL);
    }
    return 1;
}

static RSA_METHOD *made_method = NULL;
static CRYPTO_ONCE method_once = CRYPTO_ONCE_STATIC_INIT;

static void make_method(void) {
    // The default method's public operations, the token's private one.
    RSA_METHOD *method = RSA_meth_dup(RSA_PKCS1_OpenSSL());
    if (method == NULL) return;
    if (RSA_meth_set1_name(method, "Signet PKCS#11 token key") != 1 || RSA_meth_set_priv_dec(method, token_private_decrypt) != 1
        || RSA_meth_set_priv_enc(method, token_private_encrypt) != 1 || RSA_meth_set_finish(method, token_finish) != 1
        || RSA_meth_set_flags(method, RSA_meth_get_flags(method) | RSA_FLAG_EXT_PKEY) != 1) {
        RSA_meth_free(method);
        return;
    }
    made_method = method;
}

EVP_PKEY *signet_token_rsa_key(const EVP_PKEY *public_key, void *context, signet_token_decrypt_fn decrypt, signet_token_release_fn release) {
    if (!CRYPTO_THREAD_run_once(&method_once, make_method) || made_method == NULL) return NULL;
    BIGNUM *n = NULL, *e = NULL;
    if (EVP_PKEY_get_bn_param(public_key, OSSL_PKEY_PARAM_RSA_N, &n) != 1 || EVP_PKEY_get_bn_param(public_key, OSSL_PKEY_PARAM_RSA_E, &e) != 1) {
        BN_free(n);
        BN_free(e);
        return NULL;
    }
    RSA *rsa = RSA_new();
    struct signet_token_binding *binding = malloc(sizeof *binding);
    EVP_PKEY *key = EVP_PKEY_new();
    if (rsa == NULL || binding == NULL || key == NULL || RSA_set_method(rsa, made_method) != 1 || RSA_set0_key(rsa, n, e, NULL) != 1) {
        BN_free(n);
        BN_free(e);
        RSA_free(rsa);
        free(binding);
        EVP_PKEY_free(key);
        return NULL;
    }
    binding->context = context;
    binding->decrypt = decrypt;
    binding->release = release;
    RSA_set_app_data(rsa, binding);
    if (EVP_PKEY_assign_RSA(key, rsa) != 1) {
        // The binding stays unreleased: the caller keeps its context when NULL is returned.
        RSA_set_app_data(rsa, NULL);
        free(binding);
        RSA_free(rsa);
        EVP_PKEY_free(key);
        return NULL;
    }
    return key;
}

int signet_RSA_NO_PADDING(void) { return RSA_NO_PADDING; }
int signet_RSA_PKCS1_PADDING(void) { return RSA_PKCS1_PADDING; }
