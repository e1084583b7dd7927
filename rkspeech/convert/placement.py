"""Where each compiled op runs (NPU or CPU), from the build log's layer table and the .rknn.

With ``RKNN(verbose=True)``, ``build()`` prints a "Network Layer Information Table" from C code
(columns ID, OpType, DataType, Target, InputShape, OutputShape, Cycles, RW(KB), FullName).  The
FullName is ``<onnx op type>:<onnx node name>``, or ``<onnx op type>:<first output name>`` when
the ONNX node has no name (measured here, rknn-toolkit2 2.5.0); compiler-made ops (the Reshape /
Pad / Gather a dilated conv is rewritten into, ...) carry names that are not in the ONNX graph.
Fused ops keep the name of the first ONNX node (``ConvRelu`` -> ``Conv:conv0``).

The same order and targets are stored per node in the .rknn (see ``container.py``); when both
are available they are cross-checked.

REGTASK: for some convs over long time axes the compiler logs
``REGTASK: The bit width of field value exceeds the limit, ... limit: 0x1fff`` (error level) and
still returns 0; the simulator does not show it; on a board such layers are a known failure
(rknn-toolkit2 #419, model zoo #360).  Measured here: a single Conv1d C=96, k=7, dilation 9,
T=2048, rk3588 fp16 logs 28,666 such lines (T=8192: 172,020).
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

IO_OP_TYPES = ("InputOperator", "OutputOperator")
_PREFIX = re.compile(r"^(?:[DIWE] RKNN: \[[^\]]*\]\s?)")
_ROW = re.compile(r"^\s*(\d+)\s+(\S+)\s+(\S+)\s+(CPU|NPU|GPU|\S+)\s+(.*)$")
REGTASK_MARK = "exceeds the limit"
#: InputShape OutputShape Cycles [SparseRatio] RW(KB) FullName: rk3576 tables have a SparseRatio
#: column ("0%"), left blank on I/O rows (measured, rknn-toolkit2 2.5.0).
_COLUMNS = re.compile(r"^(\S+)\s+(\S+)\s+(\d+/\d+/\d+)\s+(?:\d+%\s+)?([\d.]+)\s+(.*)$")


@dataclass
class Layer:
    id: int
    op_type: str
    dtype: str
    target: str
    input_shapes: str
    output_shapes: str
    full_name: str
    onnx_type: str | None = None
    onnx_node: str | None = None  # name of the ONNX node, when FullName maps to one
    position: str = ""  # head / middle / tail (layer index thirds)
    cycles: int = 0  # the table's Cycles(DDR/NPU/Total) total
    rw_kb: float = 0.0  # the table's RW(KB): the layer's reads (inputs + weights; writes not in it)
    ddr_cycles: int = 0  # Cycles(DDR/...): the memory part (total = max(DDR, NPU) in 2.5.0 logs)
    npu_cycles: int = 0  # Cycles(.../NPU/...): the compute part

    @property
    def is_io(self) -> bool:
        return self.op_type in IO_OP_TYPES


@dataclass
class Placement:
    layers: list[Layer] = field(default_factory=list)
    tables_found: int = 0
    regtask_overflow_lines: int = 0
    crosscheck: dict[str, Any] = field(default_factory=lambda: {"status": "not run"})

    @property
    def compute(self) -> list[Layer]:
        return [la for la in self.layers if not la.is_io]

    @property
    def cpu_layers(self) -> list[Layer]:
        return [la for la in self.compute if la.target == "CPU"]

    @property
    def npu_layers(self) -> list[Layer]:
        return [la for la in self.compute if la.target == "NPU"]

    def cpu_op_types(self) -> dict[str, int]:
        hist: dict[str, int] = {}
        for la in self.cpu_layers:
            hist[la.op_type] = hist.get(la.op_type, 0) + 1
        return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))

    def estimate(self) -> dict[str, Any]:
        """The layer table's compiler estimates, summed.  rknn-toolkit2 2.5.0 fills Cycles only
        for conv-family layers (Conv, ConvAdd, ConvTranspose, exMatMul, ...): measured on the
        reduced npu step (B=16, rk3588), 77 of 1166 layers; elementwise, reshape and CPU layers print
        ``0/0/0``.  So ``cycles_total`` is the convolutions' estimate, not the graph's time;
        ``rw_mb_*`` (RW(KB), filled for every layer) is the traffic the compiler plans: its reads
        (inputs + weights); the outputs' writes come on top (``rkspeech.estimate``)."""
        return {"cycles_total": sum(la.cycles for la in self.compute),
                "rw_mb_total": round(sum(la.rw_kb for la in self.compute) / 1024, 1),
                "rw_mb_cpu": round(sum(la.rw_kb for la in self.cpu_layers) / 1024, 1)}

    def to_report(self) -> dict[str, Any]:
        return {
            "layers": len(self.layers),
            "npu_ops": len(self.npu_layers),
            "cpu_ops": len(self.cpu_layers),
            "io_ops": len(self.layers) - len(self.compute),
            "other_ops": len(self.compute) - len(self.npu_layers) - len(self.cpu_layers),
            "cpu_op_types": self.cpu_op_types(),
            "cpu_op_list": [
                {k: v for k, v in asdict(la).items()} for la in self.cpu_layers
            ],
            "cpu_by_position": _count(la.position for la in self.cpu_layers),
            "estimate": self.estimate(),
            "tables_found": self.tables_found,
            "crosscheck": self.crosscheck,
        }


def _count(items: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out


def _number(text: str, kind):
    try:
        return kind(text)
    except ValueError:
        return kind(0)


def _strip(line: str) -> str:
    return _PREFIX.sub("", line.rstrip("\r\n"))


def parse_log_lines(lines: Iterable[str]) -> tuple[list[list[Layer]], int]:
    """Return (every layer table found, REGTASK overflow line count)."""
    tables: list[list[Layer]] = []
    regtask = 0
    state = "scan"  # scan -> header -> rows
    current: list[Layer] = []
    for raw in lines:
        if "REGTASK" in raw and REGTASK_MARK in raw:
            regtask += 1
            continue
        line = _strip(raw)
        if state == "scan":
            if "Network Layer Information Table" in line:
                state, current = "header", []
            continue
        if state == "header":
            if line.lstrip().startswith("ID") and "OpType" in line:
                state = "rows"
            continue
        # rows
        if line.strip().startswith("---"):
            if current:
                tables.append(current)
                state = "scan"
            continue
        m = _ROW.match(line)
        if not m:
            if current:
                tables.append(current)
            state = "scan"
            continue
        cols = _COLUMNS.match(m.group(5))
        if cols:
            in_shape, out_shape, cycles, rw, full = cols.groups()
        else:
            rest = m.group(5).split(None, 4) + [""] * 5
            in_shape, out_shape, cycles, rw, full = rest[:5]
        parts = (cycles.split("/") + ["0", "0"])[:3] if "/" in cycles else ["0", "0", cycles]
        current.append(Layer(id=int(m.group(1)), op_type=m.group(2), dtype=m.group(3),
                             target=m.group(4), input_shapes=in_shape, output_shapes=out_shape,
                             full_name=full.strip(), cycles=_number(parts[2], int),
                             rw_kb=_number(rw, float), ddr_cycles=_number(parts[0], int),
                             npu_cycles=_number(parts[1], int)))
    if state == "rows" and current:
        tables.append(current)
    return tables, regtask


def _onnx_maps(onnx_path: str) -> tuple[dict[str, str], dict[str, str]]:
    import onnx

    model = onnx.load(onnx_path, load_external_data=False)
    by_name, by_output = {}, {}
    for node in model.graph.node:
        if node.name:
            by_name[node.name] = node.op_type
        for out in node.output:
            by_output.setdefault(out, node.name or out)
    return by_name, by_output


def analyze(log_path: str | os.PathLike, rknn_path: str | os.PathLike | None = None,
            onnx_path: str | os.PathLike | None = None) -> Placement:
    """Parse a build log (streamed; logs with ~1 M REGTASK lines are normal) into a Placement."""
    with open(log_path, "r", encoding="utf-8", errors="replace") as f:
        tables, regtask = parse_log_lines(f)
    p = Placement(tables_found=len(tables), regtask_overflow_lines=regtask)
    p.layers = tables[-1] if tables else []
    n = max(len(p.layers), 1)
    for i, la in enumerate(p.layers):
        la.position = ("head", "middle", "tail")[min(2, (3 * i) // n)]
        if ":" in la.full_name:
            la.onnx_type, _, _name = la.full_name.partition(":")
    if onnx_path is not None:
        by_name, by_output = _onnx_maps(os.fspath(onnx_path))
        for la in p.layers:
            if la.is_io or not la.onnx_type:
                continue
            name = la.full_name.partition(":")[2]
            if name in by_name:
                la.onnx_node = name
            elif name in by_output:
                la.onnx_node = by_output[name]
    if rknn_path is not None:
        p.crosscheck = crosscheck(p.layers, rknn_path)
    return p


def crosscheck(layers: list[Layer], rknn_path: str | os.PathLike) -> dict[str, Any]:
    """Compare the log's (FullName, Target) list with the per-node target bytes in the .rknn."""
    from rkspeech.core.errors import RkspeechError
    from rkspeech.contracts.rknn_file import read_container

    try:
        c = read_container(rknn_path)
    except RkspeechError as exc:
        return {"status": "unavailable", "reason": str(exc)}
    if c.nodes is None:
        return {"status": "unavailable", "reason": c.node_error}
    if not layers:
        return {"status": "rknn only", "nodes": len(c.nodes), "node_counts": c.node_counts()}
    mismatches = []
    for la, node in zip(layers, c.nodes):
        if la.full_name != node.full_name or la.target != node.target:
            mismatches.append({"id": la.id, "log": [la.full_name, la.target],
                               "rknn": [node.full_name, node.target]})
    if len(layers) != len(c.nodes):
        mismatches.append({"count": {"log": len(layers), "rknn": len(c.nodes)}})
    return {"status": "ok" if not mismatches else "mismatch", "nodes": len(c.nodes),
            "mismatches": mismatches[:20]}
