/*
 * codec: whole-image JPEG decoding and encoding with libjpeg-turbo's libjpeg
 * API (the libjpeg 6.2 API: libjpeg-turbo 2.1 and 3.x), in plain C (no
 * Python: it runs without the GIL, in any thread; every call keeps its libjpeg
 * objects and error manager on its own stack).
 *
 * Decoding (codec_decode) uses the settings TurboJPEG's tjDecompress2 uses
 * (simplejpeg's decode_jpeg): the accurate integer DCT (JDCT_ISLOW) and fancy
 * chroma upsampling, or with `fast` the fast integer DCT (JDCT_IFAST) and
 * simple upsampling; DCT scaling by 1/scale (1, 2, 4, 8). Pixels are libjpeg's,
 * so the same libjpeg gives the same pixels as simplejpeg and Pillow. CMYK and
 * YCCK images are decoded to CMYK and converted as simplejpeg converts them
 * (R = K - ((255 - C) * K >> 8), gray from that RGB by the ITU-R 601 weights
 * 4899, 9617, 1868 / 2^14, rounded).
 *
 * Strictness: with `strict`, every libjpeg warning (corrupt data, premature end
 * of data, extraneous bytes before a marker...) is an error, as in simplejpeg's
 * decode_jpeg(strict=True) (TurboJPEG's TJFLAG_STOPONWARNING); the file is read
 * to its EOI marker. Without it warnings are ignored (a truncated file decodes
 * with libjpeg's filler rows).
 *
 * Bounds: nothing is allocated from an untrusted header without a limit. The
 * output may hold at most CODEC_MAX_BYTES, and the caller's `out` must hold it;
 * with `strict`, a Huffman-coded image whose smallest component has more blocks
 * than the data has bits (each block of a scanned component takes at least one
 * bit) is refused before libjpeg allocates anything for it; libjpeg's own
 * working memory (a progressive image's coefficients) is capped at
 * CODEC_MAX_WORK.
 *
 * Encoding (codec_encode) uses TurboJPEG's tjCompress2 settings (simplejpeg's
 * encode_jpeg): jpeg_set_defaults, jpeg_set_quality(quality, force_baseline),
 * YCbCr (or grayscale) JFIF output, the luma sampling factors of the
 * subsampling and 1x1 chroma, standard Huffman tables, no restart markers; the
 * DCT is the caller's choice (TurboJPEG's legacy API picks the fast one below
 * quality 96). The encoded bytes are malloc()ed by libjpeg: free() them.
 *
 * Both return 0, or -1 with `msg` set.
 */
#ifndef SLIPSTREAM_CODEC_H
#define SLIPSTREAM_CODEC_H

#include <stddef.h>
#include <stdio.h>

#include <jpeglib.h>

#define CODEC_MAX_BYTES ((size_t)1 << 31)  /* the largest decoded image, in bytes */
#define CODEC_MAX_WORK ((long)1 << 30)     /* libjpeg's working memory, in bytes */

enum { CODEC_444 = 0, CODEC_422 = 1, CODEC_420 = 2, CODEC_GRAY = 3 };

typedef struct {
    /* inputs */
    const unsigned char *data;
    unsigned long size;
    int gray, scale, fast, strict;
    unsigned char *out;          /* NULL: only read the header (codec_decode sets the outputs and returns 0) */
    size_t out_len;
    /* outputs: the decoded image's size (set once the header is read) */
    unsigned long height, width;
    int channels;
    int colorspace;              /* the file's J_COLOR_SPACE */
    char msg[JMSG_LENGTH_MAX + 160];
} codec_decode_job;

/* Decodes job->data whole into job->out (height x width x channels, C order). */
int codec_decode(codec_decode_job *job);

typedef struct {
    /* inputs */
    const unsigned char *pixels;  /* height x width x channels, C order */
    unsigned long height, width;
    int channels;                 /* 1 (gray) or 3 (RGB) */
    int quality, subsampling, fast;
    /* outputs */
    unsigned char *jpeg;          /* malloc()ed by libjpeg: free() it */
    unsigned long jpeg_size;
    char msg[JMSG_LENGTH_MAX + 64];
} codec_encode_job;

/* Encodes job->pixels as a baseline JPEG into job->jpeg. */
int codec_encode(codec_encode_job *job);

#endif
