#include <string.h>
#include <stdlib.h>
#include <zlib.h>
#include "CSignetZlib.h"

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

int signet_inflater_restart(signet_inflater *inflater, const unsigned char *dictionary, size_t size) {
    if (inflateReset(&inflater->stream) != Z_OK) return -1;
    if (size == 0) return 0;
    if (size > 32768) {
        dictionary += size - 32768;
        size = 32768;
    }
    return inflateSetDictionary(&inflater->stream, dictionary, (uInt)size) == Z_OK ? 0 : -1;
}

struct signet_deflater { z_stream stream; };

signet_deflater *signet_deflater_new(int level) {
    signet_deflater *deflater = calloc(1, sizeof *deflater);
    if (!deflater) return NULL;
    // libzip's parameters (raw deflate, memLevel 9), so that the stream is what libzip makes
    // apart from the flush points.
    if (deflateInit2(&deflater->stream, level, Z_DEFLATED, -MAX_WBITS, 9, Z_DEFAULT_STRATEGY) != Z_OK) {
        free(deflater);
        return NULL;
    }
    return deflater;
}

void signet_deflater_free(signet_deflater *deflater) {
    if (!deflater) return;
    deflateEnd(&deflater->stream);
    free(deflater);
}

int signet_deflate(signet_deflater *deflater, const unsigned char *in, size_t in_size, int mode, size_t *consumed,
                   unsigned char *out, size_t out_size, size_t *produced) {
    z_stream *stream = &deflater->stream;
    uInt in_chunk = in_size > 0x40000000 ? 0x40000000 : (uInt)in_size;
    uInt out_chunk = out_size > 0x40000000 ? 0x40000000 : (uInt)out_size;
    stream->next_in = (unsigned char *)in;
    stream->avail_in = in_chunk;
    stream->next_out = out;
    stream->avail_out = out_chunk;
    int flush = mode == 2 ? Z_FINISH : mode == 1 ? Z_SYNC_FLUSH : Z_NO_FLUSH;
    int result = deflate(stream, flush);
    *consumed = in_chunk - stream->avail_in;
    *produced = out_chunk - stream->avail_out;
    if (result == Z_STREAM_END) return 1;
    if (result == Z_OK || result == Z_BUF_ERROR) return 0;
    return -1;
}

unsigned long signet_crc32_combine(unsigned long crc_a, unsigned long crc_b, long long length_b) {
    return crc32_combine(crc_a, crc_b, (z_off_t)length_b);
}
