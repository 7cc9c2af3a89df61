"""Pictures of graphs (gradreg.viz): boxes, gradient colours, folding, DOT/SVG/PNG/HTML,
TensorBoard event files, and the ``view``/``tensorboard`` subcommands."""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from corpus import ROOT

import gradreg as gr
from gradreg.cli import build_parser, main
from gradreg.cli_view import add_view_commands
from gradreg.errors import GraphError, GraphFileError
from gradreg.proto import event_pb2, graph_pb2
from gradreg.viz import RenderError, build_view, fold, render, write_tensorboard_events
from gradreg.viz import dot as dot_module
from gradreg.viz import tensorboard as tb
from gradreg.viz.html import page_data
from gradreg.viz.model import GRADIENT, hide_plumbing, loop_frames, stem

DATA = ROOT.parent / "view"
HAS_DOT = shutil.which("dot") is not None
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def corpus_graph(case: str, name: str = "tf_grad.pb"):
    return gr.load_graph(ROOT / case / name)


def mlp_with_gradients(layers: int, width: int = 4, name: str = "gradients"):
    """A scoped tanh MLP, its loss, and gr.gradients of the loss w.r.t. every weight."""
    g = gr.Graph()
    rng = np.random.default_rng(0)
    with g.as_default():
        h = gr.placeholder(gr.float32, [2, width], name="x")
        weights = []
        for i in range(layers):
            with gr.name_scope(f"layer_{i}"):
                w = gr.constant(rng.standard_normal((width, width)).astype(np.float32), name="w")
                b = gr.constant(np.zeros(width, np.float32), name="b")
                h = gr.tanh(gr.matmul(h, w) + b)
                weights.append(w)
        loss = gr.reduce_sum(gr.square(h), name="loss")
        before = {op.name for op in g.get_operations()}
        gr.gradients(loss, weights, name=name)
    created = {op.name for op in g.get_operations()} - before
    return g, created


def box_by_key(view, key, kind=None):
    (box,) = [b for b in view.boxes.values() if b.key == key and kind in (None, b.kind)]
    return box


# -- the view model ----------------------------------------------------------------------

def test_name_scopes_become_nested_boxes_with_op_counts(graph):
    with gr.name_scope("outer"):
        with gr.name_scope("inner"):
            a = gr.constant(1.0, name="a")
        gr.identity(a, name="b")
    view = build_view(graph)
    outer, inner = box_by_key(view, "outer"), box_by_key(view, "outer/inner")
    assert inner.parent == outer.id and outer.parent == ""
    assert (outer.count, inner.count) == (2, 1)
    assert view.nodes["outer/inner/a"].box == inner.id and view.nodes["outer/b"].box == outer.id


@pytest.mark.parametrize("name", ["gradients", "my_grads"])
def test_gradient_ops_are_exactly_the_ops_gradients_created(name):
    graph, created = mlp_with_gradients(3, name=name)
    view = build_view(graph)
    assert {n.id for n in view.nodes.values() if n.kind == GRADIENT} == created


def test_explicit_gradient_ops_override_the_naming_rule():
    graph, created = mlp_with_gradients(2)
    chosen = sorted(created)[:3]
    view = build_view(graph, gradient_ops=chosen)
    assert {n.id for n in view.nodes.values() if n.kind == GRADIENT} == set(chosen)


def test_tensorflow_gradient_graph_is_split_by_the_gradients_scope():
    graph = corpus_graph("mlp_softmax_xent")
    view = build_view(graph)
    for node in view.nodes.values():
        assert (node.kind == GRADIENT) == node.name.startswith("gradients/"), node.name


def test_v1_loop_frame_holds_the_ops_tensorflow_built_inside_it():
    graph = corpus_graph("while_v1", "forward.pb")
    view = build_view(graph)
    (frame,) = [b for b in view.boxes.values() if b.kind == "frame"]
    assert frame.key == "while/while_context"
    inside = {n for n in view.nodes if frame.id in view.chain(n)}
    assert inside == {op.name for op in graph.get_operations() if op.name.startswith("while/")}


def test_nested_loops_give_nested_frames(graph):
    n = gr.placeholder(gr.int32, [], name="n")

    def outer_body(i, acc):
        _, inner = gr.while_loop(lambda j, a: j < n, lambda j, a: (j + 1, a * 2.0), [0, acc], name="inner")
        return i + 1, inner

    gr.while_loop(lambda i, acc: i < n, outer_body, [0, gr.constant(1.0)], name="outer")
    frames = loop_frames(graph.get_operations())
    depths = {len(chain) for chain in frames.values()}
    assert depths == {0, 1, 2}
    inner_ops = [op for op, chain in frames.items() if len(chain) == 2]
    assert inner_ops and all(chain[0] != chain[1] for chain in (frames[op] for op in inner_ops))
    view = build_view(graph)
    frame_boxes = [b for b in view.boxes.values() if b.kind == "frame"]
    inner_box = [b for b in frame_boxes if view.boxes[b.parent].kind == "frame"
                 or any(view.boxes[a].kind == "frame" for a in _ancestors(view, b.id))]
    assert len(frame_boxes) == 2 and len(inner_box) == 1


def _ancestors(view, box_id):
    out, parent = [], view.boxes[box_id].parent
    while parent:
        out.append(parent)
        parent = view.boxes[parent].parent
    return out


def test_functional_while_gets_a_call_box_with_its_function_bodies():
    graph = corpus_graph("cond_while_v2", "forward.pb")
    view = build_view(graph)
    (while_op,) = [op for op in graph.get_operations() if op.type in ("While", "StatelessWhile")]
    call = box_by_key(view, while_op.name, "call")
    assert call.nodes == [while_op.name]
    bodies = {view.boxes[c].label: view.boxes[c] for c in call.boxes}
    assert set(bodies) == {while_op.get_attr("cond").name, while_op.get_attr("body").name}
    for fname, box in bodies.items():
        fdef = graph.library.get(fname)
        expected = len(fdef.node_def) + len(fdef.signature.input_arg) + len(fdef.signature.output_arg)
        assert box.count == expected and box.kind == "function"


def test_numbered_keras_style_siblings_are_grouped_by_stem(graph):
    x = gr.constant(1.0, name="x")
    for block in range(1, 5):
        for layer in ("expand", "expand_BN", "depthwise", "project", "add"):
            with gr.name_scope(f"block_{block}_{layer}"):
                x = gr.identity(x, name="op")
    view = build_view(graph)
    group = box_by_key(view, "block_2_*")
    assert group.kind == "group" and group.count == 5
    assert sorted(view.boxes[c].label for c in group.boxes) == sorted(
        f"block_2_{layer}" for layer in ("expand", "expand_BN", "depthwise", "project", "add"))
    assert (stem("block_12_expand_BN"), stem("conv_1"), stem("expanded_conv")) == ("block_12", None, None)


def test_ys_and_xs_keep_the_path_and_its_inputs_as_context():
    graph = corpus_graph("mlp_softmax_xent", "forward.pb")
    view = build_view(graph, ys=["loss"], xs=["w2"])
    path = {n for n, node in view.nodes.items() if not node.context}
    assert {"w2", "MatMul_1", "logits", "loss"} <= path
    assert "MatMul" not in path and "w1" not in view.nodes
    context = {n for n, node in view.nodes.items() if node.context}
    assert "h" in context and all(view.nodes[e.dst].id in path for e in view.edges if e.src in context)


def test_unknown_ys_is_a_graph_error_naming_it():
    graph = corpus_graph("mlp_softmax_xent", "forward.pb")
    with pytest.raises(GraphError, match="no operation 'nope'"):
        build_view(graph, ys=["nope:0"])


# -- folding -------------------------------------------------------------------------------

def test_depth_opens_scopes_up_to_that_level():
    graph, _ = mlp_with_gradients(3)
    view = build_view(graph)
    folding = fold(view, depth=1)
    assert {view.boxes[b].key for b in folding.open if b} == {"gradients", "layer_0", "layer_1", "layer_2"}
    assert folding.rep("gradients/layer_1/MatMul_grad/MatMul") == box_by_key(view, "gradients/layer_1").id


def test_expand_opens_the_matching_scope_and_everything_around_it():
    graph, _ = mlp_with_gradients(3)
    view = build_view(graph)
    folding = fold(view, depth=0, expand=["gradients/layer_1/*_grad"])
    keys = {view.boxes[b].key for b in folding.open if b}
    assert {"gradients", "gradients/layer_1", "gradients/layer_1/MatMul_grad"} <= keys
    assert "gradients/layer_0" not in keys and "layer_1" not in keys


def test_expand_that_matches_nothing_suggests_a_name():
    graph, _ = mlp_with_gradients(2)
    with pytest.raises(GraphError, match="did you mean 'gradients/layer_1'"):
        fold(build_view(graph), expand=["gradients/layer1"])


def test_calls_stay_folded_unless_expanded():
    graph = corpus_graph("cond_while_v2", "forward.pb")
    view = build_view(graph)
    (while_op,) = [op for op in graph.get_operations() if op.type in ("While", "StatelessWhile")]
    call = box_by_key(view, while_op.name, "call")
    assert call.id not in fold(view, depth=10).open
    opened = fold(view, depth=10, expand=[while_op.name]).open
    assert call.id in opened and set(call.boxes) <= opened


def test_automatic_folding_keeps_a_large_graph_within_budget_and_folds_siblings_evenly():
    graph, _ = mlp_with_gradients(100)
    view = build_view(graph)
    assert len(view.nodes) > 1000
    folding = fold(view, budget=90)
    assert 10 < folding.visible() <= 90
    assert box_by_key(view, "gradients").id in folding.open          # the largest box opens first
    series = [b for b in view.boxes.values() if b.kind == "group" and b.key.startswith("layer_[")]
    assert sorted(b.label for b in series)[:2] == ["layer_[0-9]", "layer_[10-19]"] and len(series) == 10
    assert len({b.id in folding.open for b in series}) == 1     # all open or all folded
    wide = fold(view, budget=200)
    assert wide.visible() <= 200 and len({b.id in wide.open for b in series}) == 1


# -- DOT, SVG, PNG ---------------------------------------------------------------------------

def test_dot_draws_open_boxes_as_clusters_and_folded_ones_as_counted_nodes():
    graph, _ = mlp_with_gradients(3)
    view = hide_plumbing(build_view(graph))
    folding = fold(view, depth=1)
    text = render(graph, "dot", depth=1)
    assert text.count("subgraph \"cluster_") == len(folding.open) - 1
    folded = box_by_key(view, "gradients/layer_2")
    assert re.search(rf'"{folded.id}" \[label=<<b>layer_2</b><br/><font point-size="8">{folded.count} ops<', text)
    grad_fill = dot_module.style.COLOURS["gradient"]["fill"]
    assert f'fillcolor="{grad_fill}"' in text.split(f'"{folded.id}" [')[1].split("\n")[0]


def test_dot_edges_are_aggregated_dashed_for_control_and_labelled_out_of_folded_boxes():
    graph = corpus_graph("while_v1")
    text = render(graph, "dot", depth=9)
    assert "style=dashed" in text and "constraint=false" in text     # control deps; NextIteration back edges
    folded = render(graph, "dot", depth=0)
    lines = [line for line in folded.splitlines() if "->" in line]
    assert len(lines) == len({(line.split("[")[0], "dashed" in line) for line in lines})  # one per pair and kind
    assert any("label=" in line for line in lines)


def test_svg_and_png_without_graphviz_fail_saying_how_to_install_it(monkeypatch):
    monkeypatch.setattr(dot_module.shutil, "which", lambda name: None)
    graph = corpus_graph("mlp_softmax_xent", "forward.pb")
    for fmt in ("svg", "png"):
        with pytest.raises(RenderError, match="apt install graphviz.*brew install graphviz.*conda install graphviz"):
            render(graph, fmt)
    assert render(graph, "dot").startswith("digraph")      # DOT needs nothing


@pytest.mark.skipif(not HAS_DOT, reason="Graphviz is not installed")
def test_svg_names_every_visible_op_and_folded_scope():
    graph = corpus_graph("mlp_softmax_xent")
    view = hide_plumbing(build_view(graph))
    folding = fold(view, depth=1)
    svg = render(graph, "svg", depth=1)
    root = ET.fromstring(svg)
    titles = {t.text for t in root.iter("{http://www.w3.org/2000/svg}title")}
    expected = {folding.rep(n) for n in view.nodes}
    assert expected <= titles
    png = render(graph, "png", depth=1)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(not HAS_DOT, reason="Graphviz is not installed")
def test_a_thousand_op_gradient_graph_renders_folded_in_seconds():
    graph, _ = mlp_with_gradients(100)
    start = time.perf_counter()
    svg = render(graph, "svg").decode("utf-8")
    seconds = time.perf_counter() - start
    width, height = (float(v.rstrip("pt")) for v in re.search(r'width="([\d.]+pt)" height="([\d.]+pt)"', svg).groups())
    assert seconds < 10, f"render took {seconds:.1f} s"       # about 0.1 s here
    assert width < 3000 and height < 6000          # a page, not a poster: folded to about 90 items


# -- HTML ------------------------------------------------------------------------------------

def _page_json(page: str) -> dict:
    return json.loads(re.search(r"const DATA = (\{.*?\});</script>", page, re.S).group(1))


def test_html_page_is_self_contained_and_carries_the_folded_view():
    graph = corpus_graph("cond_while_v2")
    page = render(graph, "html", depth=2)
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", page)
    assert "<script src" not in page and "<link" not in page
    assert set(re.findall(r"https?://[^\s\"'<>)]+", page)) <= {"http://www.w3.org/2000/svg"}
    data = _page_json(page)
    view = build_view(graph)
    folding = fold(hide_plumbing(view), depth=2)       # the page carries it all, the plumbing marked
    assert len(data["nodes"]) == len(view.nodes) and len(data["edges"]) == len(view.edges)
    assert len(data["boxes"]) == len(view.boxes)
    assert {data["boxes"][i]["key"] for i in data["open"]} == {view.boxes[b].key for b in folding.open if b}


def test_html_escapes_text_that_would_end_the_script(graph):
    gr.constant(1.0, name="a")
    folding = fold(build_view(graph))
    data = page_data(folding, title="</script><b>")
    from gradreg.viz.html import script_json
    text = script_json(data)
    assert "</script>" not in text and json.loads(text)["title"] == "</script><b>"


def _chromium_dom(page_path, fragment: str = "") -> str:
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={page_path.parent / 'chrome-profile'}", "--window-size=1400,1000",
            "--virtual-time-budget=5000", "--dump-dom", page_path.as_uri() + fragment]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=True).stdout


def _drawn_items(dom: str) -> list[tuple[str, tuple[float, float, float, float]]]:
    items = []
    for match in re.finditer(r'<g class="(node[^"]*|folded [^"]*)" data-(?:name|box)="([^"]*)"><rect x="([-\d.]+)" '
                             r'y="([-\d.]+)" width="([\d.]+)" height="([\d.]+)"', dom):
        items.append((match.group(2), tuple(float(v) for v in match.groups()[2:])))
    return items


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM, reason="Chromium is not installed")
def test_html_page_draws_every_visible_item_without_overlap_in_chromium(tmp_path):
    graph = corpus_graph("while_v1")
    folding = fold(hide_plumbing(build_view(graph)), depth=2)
    page = tmp_path / "g.html"
    page.write_text(render(graph, "html", depth=2))
    dom = _chromium_dom(page)
    assert 'data-ready="1"' in dom
    items = _drawn_items(dom)
    assert len(items) == folding.visible()
    for i, (name_a, (xa, ya, wa, ha)) in enumerate(items):
        for name_b, (xb, yb, wb, hb) in items[i + 1:]:
            assert xa + wa <= xb or xb + wb <= xa or ya + ha <= yb or yb + hb <= ya, (name_a, name_b)


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM, reason="Chromium is not installed")
def test_html_page_opens_boxes_named_in_the_address(tmp_path):
    graph, _ = mlp_with_gradients(4)
    page = tmp_path / "g.html"
    page.write_text(render(graph, "html", depth=0))
    closed = _chromium_dom(page)
    assert 'class="folded scope" data-box="gradients"' in closed
    opened = _chromium_dom(page, "#open=gradients/layer_2")
    assert 'class="open scope" data-box="gradients"' in opened
    assert 'class="open scope" data-box="gradients/layer_2"' in opened
    names = {name for name, _ in _drawn_items(opened)}
    assert "gradients/layer_2/MatMul_grad" in names or any(n.startswith("gradients/layer_2/") for n in names)


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM, reason="Chromium is not installed")
def test_html_boxes_open_and_fold_on_click(tmp_path):
    graph, _ = mlp_with_gradients(4)
    page = tmp_path / "g.html"
    clicks = """<script>
    const click = (selector) =>
      document.querySelector(selector).dispatchEvent(new MouseEvent("click", {bubbles: true}));
    click('.folded[data-box="layer_1"]');
    document.body.setAttribute("data-after-open", document.querySelectorAll('.open[data-box="layer_1"]').length);
    click('.open[data-box="layer_1"] .header');
    </script></body>"""
    page.write_text(render(graph, "html", depth=0).replace("</body>", clicks))
    dom = _chromium_dom(page)
    assert 'data-after-open="1"' in dom                                  # the click opened it
    assert 'class="folded scope" data-box="layer_1"' in dom              # the header click folded it again


# -- TensorBoard ------------------------------------------------------------------------------

def test_tfrecord_framing_matches_tensorflows_writer_byte_for_byte():
    with np.load(DATA / "payloads.npz") as archive:
        payloads = [archive[f"p{i}"].tobytes() for i in range(len(archive.files))]
    expected = (DATA / "records.tfrecord").read_bytes()
    assert b"".join(tb.tfrecord(p) for p in payloads) == expected
    assert list(tb.read_tfrecords(DATA / "records.tfrecord")) == payloads


def test_pure_python_crc32c_agrees_with_google_crc32c():
    google_crc32c = pytest.importorskip("google_crc32c")
    data = np.random.default_rng(1).bytes(5000)
    assert tb.crc32c_python(data) == google_crc32c.value(data)


def test_event_protos_match_the_ones_tensorflow_writes():
    records = list(tb.read_tfrecords(DATA / "tf_graph.tfevents"))
    events = [event_pb2.Event.FromString(r) for r in records]
    assert [e.WhichOneof("what") for e in events] == ["file_version", "graph_def"]
    assert events[0].file_version == tb.FILE_VERSION
    assert [e.SerializeToString() for e in events] == records       # no field gradreg does not know
    ours = event_pb2.Event(wall_time=events[1].wall_time, step=0, graph_def=events[1].graph_def)
    assert ours.SerializeToString() == records[1]
    written = gr.import_graph_def(graph_pb2.GraphDef.FromString(events[1].graph_def))
    assert [op.name for op in written.get_operations()] == [
        op.name for op in corpus_graph("mlp_softmax_xent", "forward.pb").get_operations()]


def test_event_file_holds_the_graph_and_reads_back(tmp_path):
    graph = corpus_graph("mlp_softmax_xent")
    path = write_tensorboard_events(graph, tmp_path / "logs", wall_time=1234.5)
    assert path.endswith(".gradreg") and "events.out.tfevents.0000001234." in path
    first, second = (event_pb2.Event.FromString(r) for r in tb.read_tfrecords(path))
    assert first.file_version == "brain.Event:2" and first.wall_time == 1234.5
    assert second.graph_def == (ROOT / "mlp_softmax_xent" / "tf_grad.pb").read_bytes()


def test_corrupt_event_file_is_a_file_error_naming_the_record(tmp_path):
    path = write_tensorboard_events(corpus_graph("mlp_softmax_xent"), tmp_path)
    with open(path, "r+b") as f:
        blob = bytearray(f.read())
        blob[-10] ^= 0xFF
        f.seek(0)
        f.write(bytes(blob))
    with pytest.raises(GraphFileError, match="record 1: data checksum mismatch"):
        list(tb.read_tfrecords(path))


@pytest.mark.tf
def test_tensorflow_reads_the_graph_back_identical(tmp_path):
    tf = pytest.importorskip("tensorflow")
    source = ROOT / "while_v1" / "tf_grad.pb"
    path = write_tensorboard_events(gr.load_graph(source), tmp_path)
    events = list(tf.compat.v1.train.summary_iterator(path))
    assert [e.WhichOneof("what") for e in events] == ["file_version", "graph_def"]
    assert events[1].graph_def == source.read_bytes()
    assert tf.compat.v1.GraphDef.FromString(events[1].graph_def) == tf.compat.v1.GraphDef.FromString(
        source.read_bytes())


@pytest.mark.tf
def test_tensorboards_own_loader_finds_the_graph(tmp_path):
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    source = ROOT / "cond_while_v2" / "tf_grad.pb"
    write_tensorboard_events(gr.load_graph(source), tmp_path)
    loader = accumulator.EventAccumulator(str(tmp_path))
    loader.Reload()
    graph_def = loader.Graph()
    assert graph_def == type(graph_def).FromString(source.read_bytes())


# -- the subcommands ---------------------------------------------------------------------------

def run_command(argv: list[str]) -> int:
    """The subcommand through gradreg's own parser (gradreg/cli.py wires add_view_commands in)."""
    args = build_parser().parse_args(argv)
    return args.func(args)


def test_add_view_commands_adds_both_subcommands_to_any_parser():
    parser = argparse.ArgumentParser(prog="x")
    add_view_commands(parser.add_subparsers(dest="command", required=True))
    assert parser.parse_args(["tensorboard", "g.pb", "logs"]).logdir == "logs"
    assert parser.parse_args(["view", "g.pb", "-o", "g.svg", "--depth", "2"]).depth == 2


def test_gradreg_main_runs_view_and_reports_a_bad_graph_in_one_line(tmp_path, capsys):
    assert main(["view", str(ROOT / "mlp_softmax_xent" / "forward.pb"), "-o", str(tmp_path / "g.dot")]) == 0
    assert (tmp_path / "g.dot").read_text().startswith("digraph")
    assert not [p for p in tmp_path.iterdir() if "gradreg-tmp" in p.name]     # atomic write: no temp left
    (tmp_path / "bad.pb").write_bytes(b"\xff\xff not a graph")
    assert main(["view", str(tmp_path / "bad.pb"), "-o", str(tmp_path / "h.dot")]) == 1
    assert "bad.pb" in capsys.readouterr().err and not (tmp_path / "h.dot").exists()


@pytest.mark.parametrize("suffix", ["dot", "html"] + (["svg", "png"] if HAS_DOT else []))
def test_view_command_writes_each_format(tmp_path, capsys, suffix):
    out = tmp_path / f"g.{suffix}"
    assert run_command(["view", str(ROOT / "mlp_softmax_xent" / "tf_grad.pb"), "-o", str(out), "--depth", "1"]) == 0
    data = out.read_bytes()
    start = {"dot": b"digraph", "html": b"<!DOCTYPE html>", "svg": b"<?xml", "png": b"\x89PNG"}[suffix]
    assert data.startswith(start)
    ops = len(corpus_graph("mlp_softmax_xent"))
    assert f"wrote {out} ({suffix}, {ops} ops" in capsys.readouterr().out


def test_view_command_path_selection_and_expand(tmp_path):
    out = tmp_path / "path.dot"
    source = str(ROOT / "mlp_softmax_xent" / "forward.pb")
    run_command(["view", source, "-o", str(out), "--ys", "loss", "--xs", "w2", "--depth", "5"])
    text = out.read_text()
    assert '"MatMul_1"' in text and '"MatMul" [' not in text
    run_command(["view", source, "-o", str(out), "--depth", "0", "--expand", "softmax_cross_entropy*"])
    assert "cluster_" in out.read_text()


def test_view_command_rejects_an_unknown_suffix_as_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        run_command(["view", str(ROOT / "mlp_softmax_xent" / "forward.pb"), "-o", str(tmp_path / "g.jpg")])
    assert exc.value.code == 2
    assert "use .dot, .svg, .png or .html" in capsys.readouterr().err


def test_view_command_on_a_missing_file_is_a_file_error(tmp_path):
    with pytest.raises(GraphFileError, match="cannot read"):
        run_command(["view", str(tmp_path / "none.pb"), "-o", str(tmp_path / "g.dot")])


def test_tensorboard_command_creates_the_log_directory(tmp_path, capsys):
    logdir = tmp_path / "runs" / "grad"
    assert run_command(["tensorboard", str(ROOT / "mlp_softmax_xent" / "tf_grad.pb"), str(logdir)]) == 0
    (path,) = logdir.glob("events.out.tfevents.*")
    records = list(tb.read_tfrecords(path))
    assert event_pb2.Event.FromString(records[1]).graph_def == (ROOT / "mlp_softmax_xent" / "tf_grad.pb").read_bytes()
    assert "tensorboard --logdir" in capsys.readouterr().out
