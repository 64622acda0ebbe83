#ifndef SIGNET_CPKCS11_H
#define SIGNET_CPKCS11_H
/* The PKCS#11 (Cryptoki) 2.40 types and function list, as p11-kit ships them (libp11-kit-dev). */
#include <p11-kit/pkcs11.h>
#endif
