#ifndef SIGNET_CCURL_H
#define SIGNET_CCURL_H
#include <curl/curl.h>
#endif
