"""``rkspeech inspect FILE.rknn``: check an .rknn container and show what it holds."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser("inspect", help="check an .rknn file: header, chip, I/O, custom string, "
                                              "contract, per-node CPU/NPU targets")
    p.add_argument("rknn", metavar="FILE.rknn")
    p.add_argument("--expect-target", metavar="CHIP", help="fail unless the file was built for CHIP")
    p.add_argument("--json", action="store_true", help="print JSON on stdout")
    p.add_argument("--nodes", action="store_true", help="list every node with its target")
    p.set_defaults(func=run)


def _shape(t) -> str:
    return "x".join(str(s) for s in t.shape)


def run(args: argparse.Namespace) -> int:
    import json

    from rkspeech.contracts.rknn_file import read_container

    c = read_container(args.rknn, expect_target=args.expect_target)
    if args.json:
        print(json.dumps(c.to_dict(), indent=1))
        return 0
    rows = [
        ("file", f"{c.path} ({c.file_size:,} bytes)"),
        ("container", f"{c.magic} format {c.format} ({c.format_name}), model {c.model_len:,} B, "
                      f"json {c.json_len:,} B"),
        ("target", ", ".join(c.target_platform)),
        ("toolkit", c.compiler_version or c.toolkit_version or "?"),
    ]
    for kind, infos in (("input", c.inputs), ("output", c.outputs)):
        for t in infos:
            extra = f" (model {t.model_dtype})" if t.model_dtype and t.model_dtype != t.dtype else ""
            rows.append((kind, f"{t.name} [{_shape(t)}] {t.dtype}{extra}"))
    if c.custom_string is None:
        rows.append(("custom string", "(none)"))
    elif c.custom_json is not None:
        fmt = c.custom_json.get("format") if isinstance(c.custom_json, dict) else None
        rows.append(("custom string", f"JSON, {len(c.custom_string.encode())} B, format {fmt!r}"))
    else:
        text = c.custom_string if len(c.custom_string) < 80 else c.custom_string[:77] + "..."
        rows.append(("custom string", repr(text)))
    k = c.contract
    if k is not None and k.KIND == "step":
        rows.append(("contract", f"{k.model} B={k.codes_length} N={k.cache_numel} "
                                 f"{k.sample_rate} Hz, {k.samples_per_token} samples/token"))
    elif k is not None:
        rows.append(("contract", f"{k.model} ({k.KIND}): inputs "
                                 + ", ".join(f"{n} {s}" for n, s in k.input_shapes().items())))
    elif c.contract_error:
        rows.append(("contract", f"INVALID: {c.contract_error}"))
    counts = c.node_counts()
    if counts is not None:
        io = sum(1 for n in c.nodes if n.op_type in ("InputOperator", "OutputOperator"))
        cpu = sum(1 for n in c.nodes if n.target == "CPU") - io
        rows.append(("nodes", f"{len(c.nodes)}: {counts.get('NPU', 0)} NPU, {cpu} CPU compute, {io} I/O"))
        cpu_types: dict[str, int] = {}
        for n in c.nodes:
            if n.target == "CPU" and n.op_type not in ("InputOperator", "OutputOperator"):
                cpu_types[n.op_type] = cpu_types.get(n.op_type, 0) + 1
        if cpu_types:
            rows.append(("CPU ops", ", ".join(f"{k} x{v}" for k, v in cpu_types.items())))
    else:
        rows.append(("nodes", f"not read ({c.node_error})"))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    if args.nodes and c.nodes:
        for n in c.nodes:
            print(f"  {n.index:>5}  {n.target:<4} {n.op_type:<20} {n.full_name}")
    return 0
