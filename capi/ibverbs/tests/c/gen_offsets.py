#!/usr/bin/env python3
"""Generates offsets.c: C checks that the system's <infiniband/verbs.h> lays
out the structures the library uses exactly as its vendored bindings
(src/sys.rs) say.

The numbers come from the layout assertions bindgen wrote into sys.rs
("Size of X" / "Offset of field: X::f"), so they are the sizes and offsets
the Rust code was compiled with. For each struct the library reads or
writes (ROOTS), every field bindgen asserts is checked, and so are the
fields of the anonymous unions and structs inside it (the `wr.rdma` and
`wr.atomic` unions of ibv_send_wr, the immediate-data union of ibv_wc, ...),
each as an offset from the start of the named struct the program uses.

Usage: gen_offsets.py [path/to/sys.rs] > offsets.c   (python3, std only)
"""

import os
import re
import sys

# The structs (and unions) the library reads or writes, by their C name.
ROOTS = [
    "verbs_context",
    "ibv_context",
    "ibv_context_ops",
    "ibv_device",
    "ibv_pd",
    "ibv_mr",
    "ibv_cq",
    "ibv_qp",
    "ibv_srq",
    "ibv_comp_channel",
    "ibv_wc",
    "ibv_send_wr",
    "ibv_recv_wr",
    "ibv_sge",
    "ibv_port_attr",
    "ibv_device_attr",
    "ibv_device_attr_ex",
    "ibv_query_device_ex_input",
    "ibv_qp_attr",
    "ibv_qp_cap",
    "ibv_qp_init_attr",
    "ibv_ah_attr",
    "ibv_global_route",
    "ibv_gid",
    "ibv_gid_entry",
    "ibv_srq_attr",
    "ibv_srq_init_attr",
    "ibv_async_event",
]

# Fields the library depends on by name; the generator fails if bindgen
# asserted no offset for one of them (a renamed or vanished field).
REQUIRED = {
    "verbs_context": ["sz", "context", "query_port", "query_device_ex"],
    "ibv_context": ["device", "ops", "cmd_fd", "async_fd", "num_comp_vectors", "abi_compat"],
    "ibv_context_ops": ["poll_cq", "req_notify_cq", "post_srq_recv", "post_send", "post_recv"],
    "ibv_qp": ["qp_num", "state"],
    "ibv_port_attr": ["port_cap_flags2"],
    "ibv_send_wr": ["wr.rdma.remote_addr", "wr.rdma.rkey", "wr.atomic.remote_addr",
                    "wr.atomic.compare_add", "wr.atomic.swap", "wr.atomic.rkey", "imm_data"],
    "ibv_wc": ["imm_data", "byte_len", "qp_num", "opcode", "status", "wc_flags"],
}


def parse(text):
    """(sizes, offsets, kinds, fields) from bindgen output."""
    flat = re.sub(r"\s+", " ", text)
    sizes = {m.group(1): int(m.group(2)) for m in re.finditer(
        r'\["Size of (\w+)"\] ?\[ ?::std::mem::size_of::<\w+>\(\) - (\d+)usize ?\]', flat)}
    offsets = {}
    for m in re.finditer(
            r'\["Offset of field: (\w+)::(\w+)"\] ?\[ ?::std::mem::offset_of!\(\w+, \w+\) - (\d+)usize ?\]', flat):
        offsets.setdefault(m.group(1), []).append((m.group(2), int(m.group(3))))
    kinds = {}
    fields = {}  # type -> [(field, field type)]
    cur = None
    for line in text.splitlines():
        m = re.match(r"pub (struct|union) (\w+) \{", line)
        if m:
            kinds[m.group(2)] = m.group(1)
            cur = m.group(2)
            fields[cur] = []
            continue
        if cur and line.startswith("}"):
            cur = None
            continue
        m = cur and re.match(r"    pub (\w+): (.*?),?\s*$", line)
        if m:
            fields[cur].append((m.group(1), m.group(2)))
    return sizes, offsets, kinds, fields


PRIMITIVE = {"u8": 1, "i8": 1, "c_char": 1, "c_uchar": 1, "u16": 2, "i16": 2, "c_ushort": 2,
             "u32": 4, "i32": 4, "c_int": 4, "c_uint": 4, "u64": 8, "i64": 8, "usize": 8,
             "isize": 8, "c_ulong": 8, "c_long": 8}


def size_of(ftype, sizes, aliases):
    """The size of a field's Rust type: a pointer, an asserted struct, or a
    primitive behind type aliases (None when unknown)."""
    t = ftype.strip()
    if t.startswith("*") or t.startswith("::std::option::Option<"):
        return 8
    while True:
        t = t.split("::")[-1]
        if t in PRIMITIVE:
            return PRIMITIVE[t]
        if t in sizes:
            return sizes[t]
        if t not in aliases:
            return None
        t = aliases[t]


def anon_offsets(typ, sizes, aligns, offsets, fields, aliases):
    """bindgen asserts no offset for a `__bindgen_anon_N` member: compute it
    as repr(C) does, from the member before it (asserted offset plus its
    size) aligned up to the anonymous type's alignment."""
    known = dict(offsets.get(typ, []))
    result = []
    prev_end = 0
    for field, ftype in fields.get(typ, []):
        if field in known:
            size = size_of(ftype, sizes, aliases)
            prev_end = None if size is None else known[field] + size
            continue
        if field.startswith("__bindgen_anon_"):
            if prev_end is None or ftype not in aligns:
                sys.exit(f"gen_offsets.py: {typ}::{field}: cannot place the anonymous member")
            a = aligns[ftype]
            off = (prev_end + a - 1) // a * a
            result.append((field, off))
            prev_end = off + sizes[ftype]
    return result


# bindgen appends `_` to C names that are Rust keywords (`priv` -> `priv_`).
RUST_KEYWORDS = {"as", "box", "break", "const", "crate", "do", "dyn", "else", "enum", "extern", "final",
                 "fn", "for", "impl", "in", "loop", "macro", "match", "mod", "move", "mut", "override",
                 "priv", "pub", "ref", "self", "static", "super", "trait", "type", "typeof", "unsafe",
                 "unsized", "use", "virtual", "where", "while", "yield", "async", "await", "try"}


def c_name(field):
    return field[:-1] if field.endswith("_") and field[:-1] in RUST_KEYWORDS else field


def walk(root, sizes, aligns, offsets, fields, aliases):
    """Checks for one root: (description, C expression, expected), in order.

    Anonymous members bindgen calls `__bindgen_anon_N` have no name in C:
    their fields are reached directly. Named members of an anonymous type
    (`wr`, `rdma`) are part of the C path."""
    checks = [("sizeof", None, sizes[root])]

    def visit(typ, cpath, base):
        members = offsets.get(typ, []) + anon_offsets(typ, sizes, aligns, offsets, fields, aliases)
        for field, off in sorted(members, key=lambda m: m[1]):
            if field.startswith("_bitfield") or field.startswith("__bindgen_padding"):
                continue
            ftype = dict(fields.get(typ, [])).get(field, "")
            anon = field.startswith("__bindgen_anon_")
            path = cpath if anon else cpath + [c_name(field)]
            if not anon:
                checks.append(("offset", ".".join(path), base + off))
            if "__bindgen_ty_" in ftype and (ftype in offsets or ftype in fields):
                if not anon and ftype in sizes:
                    checks.append(("member_size", ".".join(path), sizes[ftype]))
                visit(ftype, path, base + off)

    visit(root, [], 0)
    return checks


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "src", "sys.rs")
    with open(src) as f:
        text = f.read()
    sizes, offsets, kinds, fields = parse(text)
    flat = re.sub(r"\s+", " ", text)
    aligns = {m.group(1): int(m.group(2)) for m in re.finditer(
        r'\["Alignment of (\w+)"\] ?\[ ?::std::mem::align_of::<\w+>\(\) - (\d+)usize ?\]', flat)}
    aliases = dict(re.findall(r"^pub type (\w+) = ([\w:]+);", text, re.M))
    out = []
    w = out.append
    w("/* Generated by gen_offsets.py from src/sys.rs (bindgen's layout")
    w("   assertions): do not edit. Checks that the system's <infiniband/verbs.h>")
    w("   has the sizes and offsets the library was compiled with; one line per")
    w("   check, and a non-zero exit naming every struct and field that differs. */")
    w("#include <stddef.h>")
    w("#include <stdio.h>")
    w("#include <infiniband/verbs.h>")
    w("")
    w("struct check { const char *what; size_t actual; size_t expected; };")
    w("")
    w("static const struct check checks[] = {")
    total = 0
    for root in ROOTS:
        if root not in sizes or root not in kinds:
            sys.exit(f"gen_offsets.py: {root}: no size assertion in {src}")
        ctype = f"{kinds[root]} {root}"
        checks = walk(root, sizes, aligns, offsets, fields, aliases)
        have = {c[1] for c in checks if c[0] == "offset"}
        for req in REQUIRED.get(root, []):
            if req not in have:
                sys.exit(f"gen_offsets.py: {root}.{req}: no offset assertion in {src}")
        for kind, path, expected in checks:
            total += 1
            if kind == "sizeof":
                w(f'    {{ "sizeof({ctype})", sizeof({ctype}), {expected} }},')
            elif kind == "offset":
                w(f'    {{ "offsetof({ctype}, {path})", offsetof({ctype}, {path}), {expected} }},')
            else:
                w(f'    {{ "sizeof(({ctype}){{0}}.{path})", sizeof((({ctype} *)0)->{path}), {expected} }},')
    w("};")
    w("")
    w("int main(void)")
    w("{")
    w("    size_t n = sizeof(checks) / sizeof(checks[0]), bad = 0;")
    w("    for (size_t i = 0; i < n; i++) {")
    w("        if (checks[i].actual == checks[i].expected) {")
    w('            printf("ok - %s = %zu\\n", checks[i].what, checks[i].actual);')
    w("        } else {")
    w('            printf("not ok - %s: verbs.h says %zu, src/sys.rs says %zu\\n",')
    w("                   checks[i].what, checks[i].actual, checks[i].expected);")
    w("            bad++;")
    w("        }")
    w("    }")
    w('    printf("# offsets: %zu checks, %zu mismatches\\n", n, bad);')
    w("    return bad ? 1 : 0;")
    w("}")
    sys.stdout.write("\n".join(out) + "\n")
    sys.stderr.write(f"gen_offsets.py: {total} checks for {len(ROOTS)} structs\n")


if __name__ == "__main__":
    main()
