#!/usr/bin/env python3
"""Stand-in for the SFPI compiler (riscv-tt-elf-g++) in tt-metal's mock-cluster mode.

The PyPI ttnn wheel JIT-compiles kernels with a toolchain that is downloaded at build time and
cannot be had here. In mock mode nothing runs on a device, so tt-metal only needs files it can
load and size:

* ``--version``: a banner;
* compile steps (``-c``, and the shared precompiled header ``-x c++-header``): an empty output
  and the ``-MF`` dependency file;
* link steps (``-o .../<core>/<name>.elf``): a minimal ELF32 RISC-V executable (e_machine 243)
  whose .text sits at the firmware symbol ``__fw_export_text_end`` and whose .data sits at
  ``__fw_export_ldm_end`` with its load address right after .text (as the kernel linker scripts
  place it; tt_memory.cpp rejects anything else), plus an empty .rela.text section. The
  firmware ELF comes on the command line as ``-Wl,--just-symbols=<core>_weakened.elf``.

Every call is appended to $FAKE_GXX_LOG when set. Anything unexpected exits 1, loudly.
"""

import os
import shlex
import struct
import sys

LOG = os.environ.get("FAKE_GXX_LOG")


def log(msg: str) -> None:
    if LOG:
        with open(LOG, "a") as f:
            f.write(msg + "\n")


def die(msg: str) -> None:
    log("ERROR: " + msg)
    sys.stderr.write(f"fake-riscv-g++: {msg}\n")
    sys.exit(1)


def arg_after(argv: list[str], flag: str) -> str | None:
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if flag == "-o" and a.startswith("-o") and len(a) > 2:
            return a[2:]
    return None


def write_deps(mf: str | None, target: str | None) -> None:
    if mf:
        os.makedirs(os.path.dirname(os.path.abspath(mf)), exist_ok=True)
        with open(mf, "w") as f:
            f.write(f"{target or 'out.o'}:\n")


def read_symbols(path: str) -> dict[str, int]:
    with open(path, "rb") as f:
        d = f.read()
    if d[:4] != b"\x7fELF" or d[4] != 1:
        die(f"{path} is not ELF32")
    (e_shoff,) = struct.unpack_from("<I", d, 0x20)
    e_shentsize, e_shnum = struct.unpack_from("<HH", d, 0x2E)
    headers = [struct.unpack_from("<IIIIIIIIII", d, e_shoff + i * e_shentsize) for i in range(e_shnum)]
    symbols = {}
    for sh in headers:
        if sh[1] != 2:  # SHT_SYMTAB
            continue
        strtab = headers[sh[6]]
        for off in range(sh[4], sh[4] + sh[5], 16):
            st_name, st_value = struct.unpack_from("<II", d, off)
            start = strtab[4] + st_name
            symbols[d[start:d.index(b"\0", start)].decode()] = st_value
    return symbols


def firmware_elf(argv: list[str], out: str) -> str:
    candidates = []
    for a in argv:
        for piece in a.split(","):
            for prefix in ("--just-symbols=", "-R"):
                if piece.startswith(prefix) and piece.endswith(".elf"):
                    candidates.append(piece[len(prefix):])
        if a.endswith(".elf") and a != out:
            candidates.append(a)
    candidates = [c for c in candidates if os.path.exists(c)]
    if not candidates:
        die(f"link step without a firmware ELF (--just-symbols=...elf) on the command line; output {out}")
    return candidates[0]


def minimal_kernel_elf(text_addr: int, data_addr: int) -> bytes:
    text = b"\x13\x00\x00\x00"  # one nop (addi x0, x0, 0)
    data = b"\x00\x00\x00\x00"
    shstr = b"\0.text\0.data\0.rela.text\0.shstrtab\0"

    def name(s: str) -> int:
        return shstr.index(s.encode() + b"\0")

    ehsz, phsz, shsz, phnum, shnum = 52, 32, 40, 2, 5
    off_text = ehsz + phnum * phsz
    off_data = off_text + len(text)
    off_shstr = off_data + len(data)
    off_sh = (off_shstr + len(shstr) + 3) & ~3
    header = b"\x7fELF" + bytes([1, 1, 1, 0]) + b"\0" * 8
    header += struct.pack("<HHIIIIIHHHHHH", 2, 243, 1, text_addr, ehsz, off_sh, 0, ehsz, phsz, phnum, shsz, shnum, 4)
    programs = struct.pack("<IIIIIIII", 1, off_text, text_addr, text_addr, len(text), len(text), 5, 4)
    # .data: VMA __fw_export_ldm_end, load address packed right after .text
    programs += struct.pack("<IIIIIIII", 1, off_data, data_addr, text_addr + len(text), len(data), len(data), 6, 4)
    sections = b"\0" * 40
    sections += struct.pack("<IIIIIIIIII", name(".text"), 1, 6, text_addr, off_text, len(text), 0, 0, 4, 0)
    sections += struct.pack("<IIIIIIIIII", name(".data"), 1, 3, data_addr, off_data, len(data), 0, 0, 4, 0)
    sections += struct.pack("<IIIIIIIIII", name(".rela.text"), 4, 0x40, 0, off_shstr, 0, 0, 1, 4, 12)
    sections += struct.pack("<IIIIIIIIII", name(".shstrtab"), 3, 0, 0, off_shstr, len(shstr), 0, 0, 1, 0)
    blob = header + programs + text + data + shstr
    return blob + b"\0" * (off_sh - len(blob)) + sections


def main(argv: list[str]) -> None:
    log(f"CALL cwd={os.getcwd()} :: {shlex.join(argv)}")
    if "--version" in argv or "-dumpversion" in argv:
        print("riscv-tt-elf-g++ (spc mock stand-in) 15.1.0")
        return
    out, mf = arg_after(argv, "-o"), arg_after(argv, "-MF")
    if "-c" in argv or "-S" in argv or "-E" in argv or "c++-header" in argv:
        if out:
            os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
            open(out, "wb").close()
        write_deps(mf, out)
        return
    if out is None:
        die("no -o and not a compile step")
    assert out is not None
    firmware = firmware_elf(argv, out)
    symbols = read_symbols(firmware)
    if "__fw_export_text_end" not in symbols or "__fw_export_ldm_end" not in symbols:
        die(f"firmware {firmware} lacks __fw_export_text_end/__fw_export_ldm_end")
    text_addr, data_addr = symbols["__fw_export_text_end"], symbols["__fw_export_ldm_end"]
    log(f"LINK out={out} fw={firmware} text=0x{text_addr:x} data=0x{data_addr:x}")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "wb") as f:
        f.write(minimal_kernel_elf(text_addr, data_addr))
    write_deps(mf, out)


if __name__ == "__main__":
    main(sys.argv[1:])
