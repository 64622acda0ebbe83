#ifndef SIGNET_CZIP_H
#define SIGNET_CZIP_H
#include <zip.h>
#endif
