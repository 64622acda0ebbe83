#ifndef CSIGNETZLIB_H
#define CSIGNETZLIB_H

// zlib (which libzip is built on), for the archive layer only.
// One C function per thing Swift cannot call directly. Each says why it exists.

#include <stddef.h>

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
/// Starts the inflater on a new stream at a flush point of a raw deflate stream, with the up
/// to 32 KiB of output that precede that point as its dictionary (inflateSetDictionary; none
/// when `size` is 0). 0, or -1 when zlib refuses.
int signet_inflater_restart(signet_inflater *inflater, const unsigned char *dictionary, size_t size);

/// A raw deflater (deflateInit2 is a macro) with libzip's parameters, for a stream with flush
/// points at fixed offsets (a chunked deflated resource): `mode` 0 compresses, 1 ends the bytes
/// given so far with a sync flush (byte-aligned, window kept), 2 finishes the stream. Returns 1
/// when the stream is finished, 0 otherwise (call again while output room runs out), -1 on error.
typedef struct signet_deflater signet_deflater;
signet_deflater *signet_deflater_new(int level);
void signet_deflater_free(signet_deflater *deflater);
int signet_deflate(signet_deflater *deflater, const unsigned char *in, size_t in_size, int mode, size_t *consumed,
                   unsigned char *out, size_t out_size, size_t *produced);

/// zlib's crc32 over any length (its length argument is 32 bits).
unsigned long signet_crc32(unsigned long crc, const unsigned char *data, size_t size);

/// zlib's crc32_combine (its length argument is z_off_t): the CRC-32 of A followed by B from
/// theirs and B's length, for bytes whose parts are checksummed out of order.
unsigned long signet_crc32_combine(unsigned long crc_a, unsigned long crc_b, long long length_b);

#endif
