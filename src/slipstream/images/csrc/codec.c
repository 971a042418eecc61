/* Whole-image JPEG decoding and encoding; see codec.h for the contract. */
#include "codec.h"

#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>

/* ---------------------------------------------------------------- errors */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jmp;
    int strict;
    char msg[JMSG_LENGTH_MAX];
} codec_error_mgr;

static void
codec_error_exit(j_common_ptr cinfo)
{
    codec_error_mgr *err = (codec_error_mgr *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->msg);
    longjmp(err->jmp, 1);
}

static void
codec_output_message(j_common_ptr cinfo)
{
    (void)cinfo;  /* nothing is printed */
}

static void
codec_emit_message(j_common_ptr cinfo, int msg_level)
{
    /* msg_level -1 is a warning (corrupt data, or not quite a JPEG): an error
       when strict, as TurboJPEG's TJFLAG_STOPONWARNING; otherwise counted and
       ignored. msg_level >= 0 are trace messages: ignored. */
    codec_error_mgr *err = (codec_error_mgr *)cinfo->err;
    if (msg_level >= 0)
        return;
    cinfo->err->num_warnings++;
    if (!err->strict)
        return;
    (*cinfo->err->format_message)(cinfo, err->msg);
    longjmp(err->jmp, 1);
}

static struct jpeg_error_mgr *
codec_errors(codec_error_mgr *err, int strict)
{
    jpeg_std_error(&err->pub);
    err->pub.error_exit = codec_error_exit;
    err->pub.emit_message = codec_emit_message;
    err->pub.output_message = codec_output_message;
    err->strict = strict;
    err->msg[0] = '\0';
    return &err->pub;
}

/* ---------------------------------------------------------------- decode */

/* CMYK (as libjpeg gives it: Adobe's inverted values) to RGB or gray, as simplejpeg converts. */
static void
codec_cmyk_row(const JSAMPLE *cmyk, unsigned char *out, JDIMENSION width, int gray)
{
    JDIMENSION x;
    for (x = 0; x < width; x++, cmyk += 4) {
        unsigned k = cmyk[3];
        unsigned r = k - (((unsigned)(255 - cmyk[0]) * k) >> 8);
        unsigned g = k - (((unsigned)(255 - cmyk[1]) * k) >> 8);
        unsigned b = k - (((unsigned)(255 - cmyk[2]) * k) >> 8);
        if (gray) {
            *out++ = (unsigned char)((r * 4899 + g * 9617 + b * 1868 + 8192) >> 14);
        } else {
            *out++ = (unsigned char)r;
            *out++ = (unsigned char)g;
            *out++ = (unsigned char)b;
        }
    }
}

/* The fewest bytes that encode this frame: each block of the smallest component
   takes at least one bit (Huffman codes are >= 1 bit); 0 for arithmetic coding
   (no such bound). Valid after jpeg_read_header(). */
static unsigned long long
codec_min_bytes(j_decompress_ptr cinfo)
{
    unsigned long long fewest = 0;
    int ci;
    if (cinfo->arith_code)
        return 0;
    for (ci = 0; ci < cinfo->num_components; ci++) {
        const jpeg_component_info *comp = &cinfo->comp_info[ci];
        unsigned long long blocks = (unsigned long long)comp->width_in_blocks * (unsigned long long)comp->height_in_blocks;
        if (ci == 0 || blocks < fewest)
            fewest = blocks;
    }
    return (fewest + 7) / 8;
}

#define CODEC_ROWS 16  /* rows per jpeg_read_scanlines call */

int
codec_decode(codec_decode_job *job)
{
    struct jpeg_decompress_struct cinfo;
    codec_error_mgr jerr;
    JSAMPROW rows[CODEC_ROWS];
    JSAMPARRAY scratch = NULL;
    int cmyk;
    size_t stride, needed;
    unsigned long long fewest;

    cinfo.mem = NULL;  /* lets jpeg_destroy_decompress() run at any point */
    cinfo.err = codec_errors(&jerr, job->strict);
    if (setjmp(jerr.jmp)) {
        snprintf(job->msg, sizeof(job->msg), "JPEG decode failed: %s", jerr.msg);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    jpeg_create_decompress(&cinfo);
    cinfo.mem->max_memory_to_use = CODEC_MAX_WORK;  /* beyond it libjpeg fails (no backing store) */
    jpeg_mem_src(&cinfo, job->data, job->size);
    jpeg_read_header(&cinfo, TRUE);

    job->colorspace = (int)cinfo.jpeg_color_space;
    switch (cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE:
    case JCS_YCbCr:
    case JCS_RGB:
        cmyk = 0;
        cinfo.out_color_space = job->gray ? JCS_GRAYSCALE : JCS_RGB;
        break;
    case JCS_CMYK:
    case JCS_YCCK:
        cmyk = 1;
        cinfo.out_color_space = JCS_CMYK;
        break;
    default:
        snprintf(job->msg, sizeof(job->msg), "unsupported JPEG colorspace %d (%d components)", (int)cinfo.jpeg_color_space,
                 cinfo.num_components);
        goto fail;
    }
    cinfo.scale_num = 1;
    cinfo.scale_denom = (unsigned int)job->scale;
    cinfo.dct_method = job->fast ? JDCT_IFAST : JDCT_ISLOW;
    cinfo.do_fancy_upsampling = job->fast ? FALSE : TRUE;
    jpeg_calc_output_dimensions(&cinfo);

    job->height = cinfo.output_height;
    job->width = cinfo.output_width;
    job->channels = job->gray ? 1 : 3;
    stride = (size_t)cinfo.output_width * (size_t)job->channels;
    fewest = job->strict ? codec_min_bytes(&cinfo) : 0;
    if (fewest > (unsigned long long)job->size) {
        snprintf(job->msg, sizeof(job->msg),
                 "the JPEG header declares a %ux%u image, which takes at least %llu bytes to encode, but there are %lu: the header is damaged",
                 (unsigned)cinfo.image_height, (unsigned)cinfo.image_width, fewest, job->size);
        goto fail;
    }
    if ((unsigned long long)stride * cinfo.output_height > (unsigned long long)CODEC_MAX_BYTES) {
        snprintf(job->msg, sizeof(job->msg), "the JPEG header declares a %lux%lu image: more than the %zu bytes a decode may fill",
                 job->height, job->width, (size_t)CODEC_MAX_BYTES);
        goto fail;
    }
    needed = stride * (size_t)cinfo.output_height;
    if (job->out == NULL) {  /* the header only */
        jpeg_destroy_decompress(&cinfo);
        return 0;
    }
    if (job->out_len < needed) {
        snprintf(job->msg, sizeof(job->msg), "out holds %zu bytes, the %lux%lux%d image needs %zu", job->out_len, job->height,
                 job->width, job->channels, needed);
        goto fail;
    }

    jpeg_start_decompress(&cinfo);
    if (cmyk)
        scratch = (*cinfo.mem->alloc_sarray)((j_common_ptr)&cinfo, JPOOL_IMAGE, cinfo.output_width * 4, CODEC_ROWS);
    while (cinfo.output_scanline < cinfo.output_height) {
        JDIMENSION first = cinfo.output_scanline, left = cinfo.output_height - first, want = left < CODEC_ROWS ? left : CODEC_ROWS;
        JDIMENSION got, k;
        for (k = 0; k < want; k++)
            rows[k] = cmyk ? scratch[k] : job->out + (size_t)(first + k) * stride;
        got = jpeg_read_scanlines(&cinfo, rows, want);
        if (got == 0) {  /* only with suspending sources; not mem_src */
            snprintf(job->msg, sizeof(job->msg), "jpeg_read_scanlines stalled");
            goto fail;
        }
        if (cmyk)
            for (k = 0; k < got; k++)
                codec_cmyk_row(scratch[k], job->out + (size_t)(first + k) * stride, cinfo.output_width, job->gray);
    }
    jpeg_finish_decompress(&cinfo);  /* to the EOI marker: damage after the last row raises too */
    jpeg_destroy_decompress(&cinfo);
    return 0;

fail:
    jpeg_destroy_decompress(&cinfo);
    return -1;
}

/* ---------------------------------------------------------------- encode */

/* A growing malloc()ed destination (libjpeg's jpeg_mem_dest cannot be freed
   after an error midway: its current buffer is private). */
typedef struct {
    struct jpeg_destination_mgr pub;
    unsigned char *buf;
    size_t cap;
} codec_dest;

static void
codec_dest_init(j_compress_ptr cinfo)
{
    codec_dest *dest = (codec_dest *)cinfo->dest;
    dest->pub.next_output_byte = dest->buf;
    dest->pub.free_in_buffer = dest->cap;
}

static boolean
codec_dest_grow(j_compress_ptr cinfo)
{
    codec_dest *dest = (codec_dest *)cinfo->dest;
    size_t cap = dest->cap * 2;
    unsigned char *buf = cap > dest->cap ? (unsigned char *)realloc(dest->buf, cap) : NULL;
    if (buf == NULL)
        ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 10);
    dest->pub.next_output_byte = buf + dest->cap;  /* a full buffer: everything before is written */
    dest->pub.free_in_buffer = cap - dest->cap;
    dest->buf = buf;
    dest->cap = cap;
    return TRUE;
}

static void
codec_dest_term(j_compress_ptr cinfo)
{
    (void)cinfo;  /* the size is cap - free_in_buffer */
}

int
codec_encode(codec_encode_job *job)
{
    struct jpeg_compress_struct cinfo;
    codec_error_mgr jerr;
    codec_dest dest;
    JSAMPROW rows[CODEC_ROWS];
    size_t stride = (size_t)job->width * (size_t)job->channels;

    job->jpeg = NULL;
    job->jpeg_size = 0;
    memset(&dest, 0, sizeof(dest));
    if (job->channels == 1 && job->subsampling != CODEC_GRAY) {
        snprintf(job->msg, sizeof(job->msg), "a grayscale image is encoded as a grayscale JPEG (subsampling 'gray')");
        return -1;
    }
    dest.cap = stride * (size_t)job->height / 4 + 4096;
    dest.buf = (unsigned char *)malloc(dest.cap);
    if (dest.buf == NULL) {
        snprintf(job->msg, sizeof(job->msg), "out of memory for the encoded JPEG");
        return -1;
    }
    dest.pub.init_destination = codec_dest_init;
    dest.pub.empty_output_buffer = codec_dest_grow;
    dest.pub.term_destination = codec_dest_term;

    cinfo.mem = NULL;
    cinfo.err = codec_errors(&jerr, 1);
    if (setjmp(jerr.jmp)) {
        snprintf(job->msg, sizeof(job->msg), "JPEG encode failed: %s", jerr.msg);
        jpeg_destroy_compress(&cinfo);
        free(dest.buf);
        return -1;
    }
    jpeg_create_compress(&cinfo);
    cinfo.dest = &dest.pub;
    cinfo.image_width = (JDIMENSION)job->width;
    cinfo.image_height = (JDIMENSION)job->height;
    cinfo.input_components = job->channels;
    cinfo.in_color_space = job->channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&cinfo);
    jpeg_set_quality(&cinfo, job->quality, TRUE);
    cinfo.dct_method = job->fast ? JDCT_IFAST : JDCT_ISLOW;
    jpeg_set_colorspace(&cinfo, job->subsampling == CODEC_GRAY ? JCS_GRAYSCALE : JCS_YCbCr);
    if (job->subsampling != CODEC_GRAY) {
        cinfo.comp_info[0].h_samp_factor = job->subsampling == CODEC_444 ? 1 : 2;
        cinfo.comp_info[0].v_samp_factor = job->subsampling == CODEC_420 ? 2 : 1;
        cinfo.comp_info[1].h_samp_factor = cinfo.comp_info[1].v_samp_factor = 1;
        cinfo.comp_info[2].h_samp_factor = cinfo.comp_info[2].v_samp_factor = 1;
    }
    jpeg_start_compress(&cinfo, TRUE);
    while (cinfo.next_scanline < cinfo.image_height) {
        JDIMENSION first = cinfo.next_scanline, left = cinfo.image_height - first, want = left < CODEC_ROWS ? left : CODEC_ROWS, k;
        for (k = 0; k < want; k++)
            rows[k] = (JSAMPROW)(job->pixels + (size_t)(first + k) * stride);  /* libjpeg only reads them */
        jpeg_write_scanlines(&cinfo, rows, want);
    }
    jpeg_finish_compress(&cinfo);
    job->jpeg_size = (unsigned long)(dest.cap - dest.pub.free_in_buffer);
    jpeg_destroy_compress(&cinfo);
    job->jpeg = dest.buf;
    return 0;
}
