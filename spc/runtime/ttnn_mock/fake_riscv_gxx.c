/* fake_riscv_gxx.py in C: the same stand-in for the SFPI compiler, for speed.
 *
 * tt-metal runs the compiler several thousand times over the test suite (a compile and a link
 * per kernel and RISC-V core); a Python interpreter's start costs ~50 ms each time, this ~1 ms.
 * The harness builds it with the machine's C compiler when there is one, else it runs the
 * Python script; both write the same bytes (tests/test_ttnn_mock.py compares them). The
 * behaviour is documented in fake_riscv_gxx.py.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *log_path;

static void log_line(const char *a, const char *b) {
    if (!log_path) return;
    FILE *f = fopen(log_path, "a");
    if (!f) return;
    fputs(a, f);
    fputs(b, f);
    fputc('\n', f);
    fclose(f);
}

static void die(const char *msg, const char *what) {
    char line[8192];
    snprintf(line, sizeof line, "%s%s", msg, what ? what : "");
    log_line("ERROR: ", line);
    fprintf(stderr, "fake-riscv-g++: %s\n", line);
    exit(1);
}

/* shlex.quote: safe characters as they are, anything else in single quotes */
static void quote(FILE *f, const char *s) {
    int safe = *s != '\0';
    for (const char *p = s; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./-_", *p)) safe = 0;
    if (safe) { fputs(s, f); return; }
    fputc('\'', f);
    for (const char *p = s; *p; p++) {
        if (*p == '\'') fputs("'\"'\"'", f); else fputc(*p, f);
    }
    fputc('\'', f);
}

static void log_call(int argc, char **argv) {
    if (!log_path) return;
    FILE *f = fopen(log_path, "a");
    if (!f) return;
    char cwd[4096];
    fprintf(f, "CALL cwd=%s :: ", getcwd(cwd, sizeof cwd) ? cwd : "?");
    for (int i = 1; i < argc; i++) {
        if (i > 1) fputc(' ', f);
        quote(f, argv[i]);
    }
    fputc('\n', f);
    fclose(f);
}

static const char *arg_after(int argc, char **argv, const char *flag) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], flag) == 0 && i + 1 < argc) return argv[i + 1];
        if (strcmp(flag, "-o") == 0 && strncmp(argv[i], "-o", 2) == 0 && strlen(argv[i]) > 2) return argv[i] + 2;
    }
    return NULL;
}

static int has(int argc, char **argv, const char *word) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], word) == 0) return 1;
    return 0;
}

static int ends_with(const char *s, size_t n, const char *tail) {
    size_t k = strlen(tail);
    return n >= k && memcmp(s + n - k, tail, k) == 0;
}

/* mkdir -p of the folder holding ``path`` */
static void make_parent(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return;
    *slash = '\0';
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(dir, 0777) != 0 && errno != EEXIST) die("cannot make ", dir);
        *p = '/';
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) die("cannot make ", dir);
}

static void write_file(const char *path, const unsigned char *data, size_t n) {
    make_parent(path);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) die("cannot write ", path);
}

static void write_deps(const char *mf, const char *target) {
    if (!mf) return;
    char text[8192];
    int n = snprintf(text, sizeof text, "%s:\n", target ? target : "out.o");
    write_file(mf, (const unsigned char *)text, (size_t)n);
}

static uint32_t u32(const unsigned char *d, size_t off) {
    return (uint32_t)d[off] | (uint32_t)d[off + 1] << 8 | (uint32_t)d[off + 2] << 16 | (uint32_t)d[off + 3] << 24;
}

static uint16_t u16(const unsigned char *d, size_t off) { return (uint16_t)(d[off] | d[off + 1] << 8); }

/* the values of the firmware symbols __fw_export_text_end and __fw_export_ldm_end */
static void read_symbols(const char *path, uint32_t *text_end, uint32_t *ldm_end) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot read ", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *d = malloc((size_t)size + 1);
    if (!d || fread(d, 1, (size_t)size, f) != (size_t)size) die("cannot read ", path);
    fclose(f);
    d[size] = '\0';
    if (size < 52 || memcmp(d, "\x7f" "ELF", 4) != 0 || d[4] != 1) die(path, " is not ELF32");
    uint32_t shoff = u32(d, 0x20);
    uint16_t shentsize = u16(d, 0x2E), shnum = u16(d, 0x30);
    int found_text = 0, found_ldm = 0;
    for (uint32_t i = 0; i < shnum; i++) {
        size_t sh = shoff + (size_t)i * shentsize;
        if (sh + 40 > (size_t)size || u32(d, sh + 4) != 2) continue; /* SHT_SYMTAB */
        size_t strtab = shoff + (size_t)u32(d, sh + 24) * shentsize;
        uint32_t str_off = u32(d, strtab + 16), off = u32(d, sh + 16), len = u32(d, sh + 20);
        for (uint32_t e = off; e + 16 <= off + len && e + 16 <= (uint32_t)size; e += 16) {
            const char *name = (const char *)d + str_off + u32(d, e);
            if (strcmp(name, "__fw_export_text_end") == 0) { *text_end = u32(d, e + 4); found_text = 1; }
            if (strcmp(name, "__fw_export_ldm_end") == 0) { *ldm_end = u32(d, e + 4); found_ldm = 1; }
        }
    }
    free(d);
    if (!found_text || !found_ldm) die(path, " lacks __fw_export_text_end/__fw_export_ldm_end");
}

static const char *firmware_elf(int argc, char **argv, const char *out) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *piece = a;
        while (1) {
            const char *comma = strchr(piece, ',');
            size_t n = comma ? (size_t)(comma - piece) : strlen(piece);
            const char *prefixes[] = {"--just-symbols=", "-R"};
            for (int k = 0; k < 2; k++) {
                size_t p = strlen(prefixes[k]);
                if (n > p && strncmp(piece, prefixes[k], p) == 0 && ends_with(piece, n, ".elf")) {
                    static char path[4096];
                    snprintf(path, sizeof path, "%.*s", (int)(n - p), piece + p);
                    if (access(path, F_OK) == 0) return path;
                }
            }
            if (!comma) break;
            piece = comma + 1;
        }
        if (ends_with(a, strlen(a), ".elf") && strcmp(a, out) != 0 && access(a, F_OK) == 0) return a;
    }
    die("link step without a firmware ELF (--just-symbols=...elf) on the command line; output ", out);
    return NULL;
}

static unsigned char *put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) *p++ = (unsigned char)(v >> (8 * i));
    return p;
}

static unsigned char *put16(unsigned char *p, uint16_t v) {
    *p++ = (unsigned char)v;
    *p++ = (unsigned char)(v >> 8);
    return p;
}

/* minimal_kernel_elf of fake_riscv_gxx.py, byte for byte */
static size_t minimal_kernel_elf(unsigned char *buf, uint32_t text_addr, uint32_t data_addr) {
    static const char shstr[] = "\0.text\0.data\0.rela.text\0.shstrtab\0";
    const uint32_t shstr_len = sizeof shstr - 1, n_text = 1, n_data = 7, n_rela = 13, n_shstrtab = 24;
    const uint32_t ehsz = 52, phsz = 32, shsz = 40, phnum = 2, shnum = 5;
    const uint32_t off_text = ehsz + phnum * phsz, off_data = off_text + 4, off_shstr = off_data + 4;
    const uint32_t off_sh = (off_shstr + shstr_len + 3) & ~3u;
    unsigned char *p = buf;
    memset(buf, 0, off_sh + shnum * shsz);
    memcpy(p, "\x7f" "ELF\x01\x01\x01\x00", 8);
    p += 16;
    p = put16(p, 2), p = put16(p, 243), p = put32(p, 1), p = put32(p, text_addr), p = put32(p, ehsz);
    p = put32(p, off_sh), p = put32(p, 0), p = put16(p, ehsz), p = put16(p, phsz), p = put16(p, phnum);
    p = put16(p, shsz), p = put16(p, shnum), p = put16(p, 4);
    const uint32_t programs[2][8] = {{1, off_text, text_addr, text_addr, 4, 4, 5, 4},
                                     {1, off_data, data_addr, text_addr + 4, 4, 4, 6, 4}};
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 8; k++) p = put32(p, programs[i][k]);
    p = put32(p, 0x00000013); /* one nop (addi x0, x0, 0) */
    p = put32(p, 0);          /* .data */
    memcpy(p, shstr, shstr_len);
    p = buf + off_sh + shsz; /* section 0 is all zeros */
    const uint32_t sections[4][10] = {{n_text, 1, 6, text_addr, off_text, 4, 0, 0, 4, 0},
                                      {n_data, 1, 3, data_addr, off_data, 4, 0, 0, 4, 0},
                                      {n_rela, 4, 0x40, 0, off_shstr, 0, 0, 1, 4, 12},
                                      {n_shstrtab, 3, 0, 0, off_shstr, shstr_len, 0, 0, 1, 0}};
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 10; k++) p = put32(p, sections[i][k]);
    return off_sh + shnum * shsz;
}

int main(int argc, char **argv) {
    log_path = getenv("FAKE_GXX_LOG");
    log_call(argc, argv);
    if (has(argc, argv, "--version") || has(argc, argv, "-dumpversion")) {
        puts("riscv-tt-elf-g++ (spc mock stand-in) 15.1.0");
        return 0;
    }
    const char *out = arg_after(argc, argv, "-o"), *mf = arg_after(argc, argv, "-MF");
    if (has(argc, argv, "-c") || has(argc, argv, "-S") || has(argc, argv, "-E") || has(argc, argv, "c++-header")) {
        if (out) write_file(out, (const unsigned char *)"", 0);
        write_deps(mf, out);
        return 0;
    }
    if (!out) die("no -o and not a compile step", NULL);
    const char *firmware = firmware_elf(argc, argv, out);
    uint32_t text_addr = 0, data_addr = 0;
    read_symbols(firmware, &text_addr, &data_addr);
    char line[8192];
    snprintf(line, sizeof line, "out=%s fw=%s text=0x%x data=0x%x", out, firmware, text_addr, data_addr);
    log_line("LINK ", line);
    unsigned char elf[512];
    write_file(out, elf, minimal_kernel_elf(elf, text_addr, data_addr));
    write_deps(mf, out);
    return 0;
}
