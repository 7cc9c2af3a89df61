// gradreg graph page: lays out and draws the graph in DATA (written by gradreg/viz/html.py).
// Boxes (name scopes, loop frames, calls, function bodies) open and close on click; each
// open box is laid out on its own in layers (longest path, barycentre ordering, dummy
// points for long edges) and then placed as one block in its parent, so opening a box
// never moves what is outside it by more than its growth.
"use strict";
(function () {
  const D = DATA;
  const SVGNS = "http://www.w3.org/2000/svg";
  const FONT = "11px Helvetica, Arial, sans-serif";
  const SMALL_FONT = "9px Helvetica, Arial, sans-serif";
  const PAD = 10, HEADER = 18, GAP_X = 16, GAP_Y = 30, DUMMY_W = 6, LINE = 13;
  const COL = D.colours;

  // -- structure -------------------------------------------------------------------------
  const boxes = D.boxes, nodes = D.nodes;
  const nodeChain = nodes.map((n) => chainOf(n.box));
  function chainOf(b) {             // box indices from the top (root excluded) down to b
    const out = [];
    for (let x = b; x > 0; x = boxes[x].parent) out.push(x);
    return out.reverse();
  }
  const state = { open: new Set([0].concat(D.open)), view: { x: 0, y: 0, k: 1 }, plumbing: !!D.plumbing };

  // Plumbing (constants, variables, their reads, NoOps that only order ops) is listed inside
  // the nodes that use it unless the "variables & constants" switch draws it as nodes.
  function hidden(n) { return !state.plumbing && nodes[n].plumb === 1; }
  function liveBox(b) { return state.plumbing || boxes[b].live > 0; }
  function liveBoxes(box) { return box.boxes.filter(liveBox); }
  function liveNodes(box) { return box.nodes.filter((n) => !hidden(n)); }
  // With the plumbing hidden, a scope left holding one node (conv1/convolution around its
  // Conv2D) is drawn as that node: soleNode(b) is that node, or -1.
  let soleMemo = new Map();
  function soleNode(b) {
    if (state.plumbing || b === 0 || boxes[b].kind !== "scope") return -1;
    if (soleMemo.has(b)) return soleMemo.get(b);
    const inside = liveNodes(boxes[b]).concat(liveBoxes(boxes[b]).map((c) => (soleNode(c) >= 0 ? soleNode(c) : -2)));
    const found = inside.length === 1 && inside[0] >= 0 ? inside[0] : -1;
    soleMemo.set(b, found);
    return found;
  }
  function contents(box) {          // the items a box lays out: its boxes (or their sole node) and nodes
    return liveBoxes(box).map((c) => (soleNode(c) >= 0 ? "n" + soleNode(c) : "b" + c))
      .concat(liveNodes(box).map((n) => "n" + n));
  }

  function rep(n) {                 // the visible item standing for node n (null: hidden)
    if (hidden(n)) return null;
    for (const b of nodeChain[n]) if (soleNode(b) < 0 && !state.open.has(b)) return "b" + b;
    return "n" + n;
  }
  function itemBox(item) {          // the box directly holding a visible item
    if (item[0] === "b") return boxes[+item.slice(1)].parent;
    let b = nodes[+item.slice(1)].box;
    while (soleNode(b) >= 0) b = boxes[b].parent;
    return b;
  }
  function isGradient(item) {
    return item[0] === "n" ? nodes[+item.slice(1)].kind === 1 : boxes[+item.slice(1)].grad === 1;
  }
  function passThrough(b) {         // an open scope holding nothing but one open scope
    const box = boxes[b], inner = contents(box);
    return b > 0 && (box.kind === "scope" || box.kind === "group") && inner.length === 1 && inner[0][0] === "b" &&
      state.open.has(+inner[0].slice(1)) && ["scope", "group"].includes(boxes[+inner[0].slice(1)].kind);
  }

  // -- edges between visible items ---------------------------------------------------------
  function aggregateEdges() {
    const groups = new Map();
    for (const [s, d, port, shape, control] of D.edges) {
      const a = rep(s), b = rep(d);
      if (a === null || b === null || a === b) continue;
      const key = a + "|" + b + "|" + control;
      let g = groups.get(key);
      if (!g) groups.set(key, (g = { src: a, dst: b, control: !!control, count: 0, shapes: new Set(), ports: new Set(), back: false }));
      g.count += 1;
      if (shape) g.shapes.add(shape);
      g.ports.add(port);
      if (D.backTypes.includes(nodes[s].type)) g.back = true;
    }
    const edges = [...groups.values()];
    const into = new Map(), out = new Map();
    for (const e of edges) if (e.control) {
      into.set(e.dst, (into.get(e.dst) || 0) + 1);
      out.set(e.src, (out.get(e.src) || 0) + 1);
    }
    const notes = new Map();
    for (const [k, v] of into) if (v > D.controlHub) notes.set(k, "\u21e0 control from " + v + " items");
    for (const [k, v] of out) if (v > D.controlHub && !notes.has(k)) notes.set(k, "control to " + v + " items \u21e2");
    const kept = edges.filter((e) => !(e.control && (notes.has(e.dst) && into.get(e.dst) > D.controlHub ||
      notes.has(e.src) && out.get(e.src) > D.controlHub)));
    return { edges: kept, notes };
  }

  function edgeLabel(e) {
    if (e.control) return "";
    const folded = e.src[0] === "b" || e.dst[0] === "b";
    const multi = e.src[0] === "n" && nodes[+e.src.slice(1)].nout > 1;
    if (!folded && !multi) return "";
    const shapes = [...e.shapes];
    let text = shapes.length === 1 ? shapes[0] : (e.count > 1 ? "\u00d7" + e.count : "");
    if (multi && !folded) text = (":" + [...e.ports][0] + " " + text).trim();
    else if (e.count > 1 && shapes.length === 1) text += " \u00d7" + e.count;
    return text;
  }

  // -- sizes of leaf items ---------------------------------------------------------------
  const ctx = document.createElement("canvas").getContext("2d");
  function textWidth(text, font) { ctx.font = font; return ctx.measureText(text).width; }
  function itemLines(item, notes) {
    let lines;
    if (item[0] === "n") {
      const n = nodes[+item.slice(1)];
      lines = [[n.type, n.small ? "small" : "bold"]];
      if (n.label) lines.push([n.label, "small"]);
      if (n.shapes) lines.push([n.shapes, "shape"]);
      if (!state.plumbing && n.params) for (const p of n.params) lines.push([p, "param"]);
    } else {
      const b = boxes[+item.slice(1)];
      if (b.kind === "call") {
        const n = nodes[b.nodes[0]];
        lines = [[n.type, "bold"], [n.label || b.title, "small"]];
        if (n.shapes) lines.push([n.shapes, "shape"]);
        lines.push(["\u0192 " + b.functions, "call"]);
      } else {
        lines = [[b.title, "bold"], [summary(b), "small"]];
      }
    }
    if (notes.has(item)) lines.push([notes.get(item), "note"]);
    return lines;
  }
  function leafSize(item, notes) {
    const lines = itemLines(item, notes);
    let w = 0;
    for (const [t, kind] of lines) w = Math.max(w, textWidth(t, kind === "bold" ? "bold " + FONT : kind === "small" && lines.length > 1 ? FONT : SMALL_FONT));
    const small = item[0] === "n" && nodes[+item.slice(1)].small;
    const folded = item[0] === "b";      // room for the "+" in the corner
    return { w: Math.ceil(w) + (small ? 10 : folded ? 30 : 16), h: lines.length * (small ? 11 : LINE) + (small ? 5 : 8), lines };
  }

  // -- layout of one open box ------------------------------------------------------------
  // Returns {w, h, items: Map(item -> {x, y, w, h}), dummies: Map(edgeKey -> [{x, y}])},
  // positions relative to the box's top-left corner.
  function layoutBox(b, ctxLayout) {
    if (passThrough(b)) {
      const only = +contents(boxes[b])[0].slice(1);
      const inner = layoutBox(only, ctxLayout);
      const child = "b" + only;
      const lay = { w: inner.w, h: inner.h, items: new Map([[child, { x: 0, y: 0, w: inner.w, h: inner.h }]]),
        dummies: new Map(), merged: true };
      ctxLayout.layouts.set(b, lay);
      return lay;
    }
    const box = boxes[b];
    const items = [];
    const size = new Map();
    for (const item of contents(box)) {
      const c = +item.slice(1);
      if (item[0] === "b" && state.open.has(c)) {
        const sub = layoutBox(c, ctxLayout);
        size.set(item, { w: sub.w, h: sub.h });
      } else size.set(item, leafSize(item, ctxLayout.notes));
      items.push(item);
    }
    const local = ctxLayout.localEdges.get(b) || [];
    const lay = layered(items, size, local);
    const top = b === 0 ? PAD : HEADER + 4;
    const pad = b === 0 ? PAD : 8;
    for (const p of lay.items.values()) { p.x += pad; p.y += top; }
    for (const pts of lay.dummies.values()) for (const p of pts) { p.x += pad; p.y += top; }
    lay.w = Math.max(lay.w + 2 * pad, textWidth(boxTitle(b), "bold " + FONT) + 30);
    lay.h = lay.h + top + pad;
    ctxLayout.layouts.set(b, lay);
    return lay;
  }

  function layered(items, size, edges) {
    const index = new Map(items.map((it, i) => [it, i]));
    const ranked = [];               // [from, to, edge, weight] oriented for ranking
    const feeds = new Map();         // gradient item -> Map(forward item -> edges from it)
    for (const e of edges) {
      if (e.back) continue;
      let a = index.get(e.localSrc), c = index.get(e.localDst);
      if (e.crossing && !isGradient(e.localSrc)) {
        // With mirror, a gradient item stands beside the forward item it reads most from
        // (weight 0: same layer allowed), the gradient running upward, activations sideways.
        // Counted over all the edges between the two (many, between the ops inside two boxes).
        if (!feeds.has(c)) feeds.set(c, new Map());
        feeds.get(c).set(a, (feeds.get(c).get(a) || 0) + e.count);
        continue;
      }
      if (e.reversed) [a, c] = [c, a];
      ranked.push([a, c, e, 1]);
    }
    for (const [c, from] of feeds) {
      let best = -1, most = 0;
      for (const [a, count] of from) if (count > most) { best = a; most = count; }
      ranked.push([best, c, null, 0]);
    }
    const acyclic = breakCycles(items.length, ranked);
    const rank = longestPath(items.length, acyclic);
    return placeLayers(items, size, rank, acyclic);
  }

  function breakCycles(n, ranked) {   // depth-first; an edge closing a cycle is turned round
    const seen = new Uint8Array(n);
    const adj = Array.from({ length: n }, () => []);
    for (const r of ranked) adj[r[0]].push(r);
    const out = [];
    for (let start = 0; start < n; start++) {
      if (seen[start]) continue;
      const stack = [[start, 0]];
      seen[start] = 1;
      while (stack.length) {
        const top = stack[stack.length - 1];
        const v = top[0];
        if (top[1] < adj[v].length) {
          const r = adj[v][top[1]++];
          const w = r[1];
          if (seen[w] === 1) out.push([w, v, r[2], r[3]]);
          else { out.push(r); if (seen[w] === 0) { seen[w] = 1; stack.push([w, 0]); } }
        } else { seen[v] = 2; stack.pop(); }
      }
    }
    return out.filter((r) => r[0] !== r[1]);
  }

  function longestPath(n, edges) {
    const succ = Array.from({ length: n }, () => []), indeg = new Array(n).fill(0);
    for (const [a, c, , w] of edges) { succ[a].push([c, w]); indeg[c] += 1; }
    const hasPred = indeg.map((d) => d > 0);
    const rank = new Array(n).fill(0), order = [], queue = [];
    for (let i = 0; i < n; i++) if (!indeg[i]) queue.push(i);
    for (let q = 0; q < queue.length; q++) {
      const v = queue[q];
      order.push(v);
      for (const [w, weight] of succ[v]) {
        rank[w] = Math.max(rank[w], rank[v] + weight);
        if (--indeg[w] === 0) queue.push(w);
      }
    }
    // Sources sink to just above their first consumer (a constant sits next to its use).
    for (let i = order.length - 1; i >= 0; i--) {
      const v = order[i];
      if (!hasPred[v] && succ[v].length) rank[v] = Math.min(...succ[v].map(([w, weight]) => rank[w] - weight));
    }
    const low = Math.min(0, ...rank);
    return rank.map((r) => r - low);
  }

  function placeLayers(items, size, rank, edges) {
    const nLayers = Math.max(0, ...rank) + 1;
    const vert = items.map((it, i) => ({ id: it, rank: rank[i], w: size.get(it).w, h: size.get(it).h, up: [], down: [] }));
    const dummyChains = new Map();
    for (const [a, c, e] of edges) {
      if (!e || dummyChains.has(e.pair)) continue;
      let prev = a;
      const chain = [];
      for (let r = rank[a] + 1; r < rank[c]; r++) {
        const d = vert.length;
        vert.push({ id: null, rank: r, w: DUMMY_W, h: 1, up: [], down: [] });
        vert[prev].down.push(d); vert[d].up.push(prev);
        chain.push(d);
        prev = d;
      }
      if (rank[c] > rank[a]) { vert[prev].down.push(c); vert[c].up.push(prev); }
      dummyChains.set(e.pair, { chain, flipped: items[a] !== e.localSrc });
    }
    const layers = Array.from({ length: nLayers }, () => []);
    vert.forEach((v, i) => layers[v.rank].push(i));
    orderLayers(layers, vert);
    const heights = layers.map((l) => Math.max(1, ...l.map((i) => vert[i].h)));
    const ys = [];
    let y = 0;
    for (let r = 0; r < nLayers; r++) { ys.push(y); y += heights[r] + GAP_Y; }
    const xs = positionX(layers, vert);
    let width = 0;
    vert.forEach((v, i) => { width = Math.max(width, xs[i] + v.w); });
    const out = new Map();
    vert.forEach((v, i) => {
      // tops aligned: a box and the box beside it start level, so their contents line up
      if (v.id !== null) out.set(v.id, { x: xs[i], y: ys[v.rank], w: v.w, h: v.h });
    });
    const dummies = new Map();
    for (const [key, { chain, flipped }] of dummyChains) {
      const pts = chain.map((d) => ({ x: xs[d] + DUMMY_W / 2, y: ys[vert[d].rank] + heights[vert[d].rank] / 2 }));
      dummies.set(key, flipped ? pts.reverse() : pts);
    }
    return { w: width, h: Math.max(0, y - GAP_Y), items: out, dummies };
  }

  function orderLayers(layers, vert) {
    const pos = new Float64Array(vert.length);
    const setPos = (l) => l.forEach((v, i) => { pos[v] = i; });
    layers.forEach(setPos);
    const bary = (v, dir) => {
      const ns = dir ? vert[v].up : vert[v].down;
      if (!ns.length) return pos[v];
      let s = 0;
      for (const w of ns) s += pos[w];
      return s / ns.length;
    };
    for (let it = 0; it < 6; it++) {
      const down = it % 2 === 0;
      const seq = down ? layers.slice(1) : layers.slice(0, -1).reverse();
      for (const l of seq) {
        const key = new Map(l.map((v) => [v, bary(v, down)]));
        l.sort((a, b) => key.get(a) - key.get(b));
        setPos(l);
      }
    }
  }

  function positionX(layers, vert) {
    const xs = new Float64Array(vert.length);
    for (const l of layers) {
      let x = 0;
      for (const v of l) { xs[v] = x; x += vert[v].w + (vert[v].id === null ? 4 : GAP_X); }
    }
    const centre = (v) => xs[v] + vert[v].w / 2;
    for (let it = 0; it < 8; it++) {
      const down = it % 2 === 0;
      const seq = down ? layers : layers.slice().reverse();
      for (const l of seq) {
        const want = l.map((v) => {
          const ns = (down ? vert[v].up : vert[v].down).concat(it > 3 ? (down ? vert[v].down : vert[v].up) : []);
          if (!ns.length) return xs[v];
          let s = 0;
          for (const w of ns) s += centre(w);
          return s / ns.length - vert[v].w / 2;
        });
        // keep the order: sweep right to resolve overlaps, then left to pull back
        let right = -Infinity;
        l.forEach((v, i) => {
          const gap = vert[v].id === null ? 4 : GAP_X;
          xs[v] = Math.max(want[i], right);
          right = xs[v] + vert[v].w + gap;
        });
        let left = Infinity;
        for (let i = l.length - 1; i >= 0; i--) {
          const v = l[i];
          const gap = vert[v].id === null ? 4 : GAP_X;
          xs[v] = Math.min(xs[v], left - vert[v].w);
          left = xs[v] - gap;
        }
      }
    }
    let min = Infinity;
    for (let i = 0; i < vert.length; i++) min = Math.min(min, xs[i]);
    for (let i = 0; i < vert.length; i++) xs[i] -= min;
    return xs;
  }

  // -- whole-picture layout ----------------------------------------------------------------
  function openChain(item) {           // open boxes holding a visible item, top first
    return [0].concat(chainOf(itemBox(item)));
  }

  function layoutAll() {
    const { edges, notes } = aggregateEdges();
    const localEdges = new Map();
    edges.forEach((e, i) => {
      e.key = i;
      const ca = openChain(e.src).concat([e.src]), cb = openChain(e.dst).concat([e.dst]);
      let k = 0;
      while (k < ca.length - 1 && k < cb.length - 1 && ca[k + 1] === cb[k + 1]) k++;
      e.lca = ca[k];
      e.localSrc = typeof ca[k + 1] === "number" ? "b" + ca[k + 1] : ca[k + 1];
      e.localDst = typeof cb[k + 1] === "number" ? "b" + cb[k + 1] : cb[k + 1];
      e.reversed = D.mirror && isGradient(e.localSrc) && isGradient(e.localDst);
      e.crossing = D.mirror && isGradient(e.localSrc) !== isGradient(e.localDst);
      e.pair = e.localSrc + ">" + e.localDst;
      if (!localEdges.has(e.lca)) localEdges.set(e.lca, []);
      localEdges.get(e.lca).push(e);
    });
    const ctxLayout = { layouts: new Map(), notes, localEdges };
    const root = layoutBox(0, ctxLayout);
    const abs = new Map();             // item -> absolute rect
    const absDummies = new Map();
    const place = (b, ox, oy) => {
      const lay = ctxLayout.layouts.get(b);
      for (const [item, p] of lay.items) {
        const r = { x: p.x + ox, y: p.y + oy, w: p.w, h: p.h };
        abs.set(item, r);
        if (item[0] === "b" && state.open.has(+item.slice(1))) place(+item.slice(1), r.x, r.y);
      }
      for (const [key, pts] of lay.dummies) absDummies.set(key, pts.map((p) => ({ x: p.x + ox, y: p.y + oy })));
    };
    place(0, 0, 0);
    return { root, abs, absDummies, edges, notes, layouts: ctxLayout.layouts };
  }

  // -- drawing -----------------------------------------------------------------------------
  function el(tag, attrs, parent, text) {
    const e = document.createElementNS(SVGNS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function boxTitle(b) {
    const box = boxes[b];
    let title = box.title;
    for (let p = box.parent; p > 0 && passThrough(p); p = boxes[p].parent) title = boxes[p].title + "/" + title;
    return title;
  }
  function outermostMerged(b) {
    let top = b;
    while (boxes[top].parent > 0 && passThrough(boxes[top].parent)) top = boxes[top].parent;
    return top;
  }
  function kindColours(gradient) { return gradient ? COL.gradient : COL.forward; }
  function summary(box) {           // "12 ops": the ops drawn, with or without the plumbing
    if (state.plumbing || box.live === undefined) return box.summary;
    return box.live + " op" + (box.live === 1 ? "" : "s");
  }

  const svg = document.getElementById("graph");
  const viewport = el("g", { id: "viewport" }, svg);
  let current = null;

  function draw() {
    soleMemo = new Map();
    current = layoutAll();
    viewport.textContent = "";
    const gBoxes = el("g", { class: "boxes" }, viewport);
    const gEdges = el("g", { class: "edges" }, viewport);
    const gItems = el("g", { class: "items" }, viewport);
    for (const [item, r] of current.abs) {
      if (item[0] === "b" && state.open.has(+item.slice(1))) drawOpenBox(+item.slice(1), r, gBoxes);
    }
    for (const e of current.edges) drawEdge(e, gEdges);
    for (const [item, r] of current.abs) {
      if (item[0] === "n") drawNode(+item.slice(1), r, gItems);
      else if (!state.open.has(+item.slice(1))) drawFolded(+item.slice(1), r, gItems);
    }
    document.getElementById("count").textContent =
      D.total + " ops (" + D.gradients + " gradient), " + [...current.abs.keys()].filter(
        (it) => it[0] === "n" || !state.open.has(+it.slice(1))).length + " shown";
    applyView();
  }

  function drawOpenBox(b, r, parent) {
    if (passThrough(b)) return;            // drawn as its only child, with a merged title
    const box = boxes[b];
    const c = kindColours(box.grad);
    const g = el("g", { class: "open " + box.kind, "data-box": box.key }, parent);
    const stroke = box.kind === "frame" ? COL.frame : (box.kind === "call" || box.kind === "function") ? COL.call : c.box_line;
    el("rect", { x: r.x, y: r.y, width: r.w, height: r.h, rx: 8, fill: c.box, stroke,
      "stroke-width": box.kind === "frame" || box.kind === "call" ? 1.6 : 1,
      "stroke-dasharray": box.kind === "frame" ? "6 4" : "none" }, g);
    const head = el("g", { class: "header" }, g);
    el("rect", { x: r.x, y: r.y, width: r.w, height: HEADER, fill: "transparent" }, head);
    el("text", { x: r.x + 8, y: r.y + 13, class: "title" }, head, "\u25be " + boxTitle(b));
    el("title", {}, head, box.key + " \u2014 " + summary(box) + " (click to fold)");
    head.addEventListener("click", (ev) => { ev.stopPropagation(); toggle(outermostMerged(b), ev); });
  }

  function drawLines(lines, r, g, small) {
    let y = r.y + (small ? 10 : 13);
    for (const [t, kind] of lines) {
      el("text", { x: r.x + r.w / 2, y, class: "t-" + kind + (small ? " t-tiny" : "") }, g, t);
      y += small ? 11 : LINE;
    }
  }

  function drawNode(n, r, parent) {
    const node = nodes[n];
    const c = kindColours(node.kind);
    const g = el("g", { class: "node" + (node.context ? " context" : ""), "data-name": node.name }, parent);
    const fill = node.context ? "#ffffff" : node.small ? COL.constant_fill : c.fill;
    const stroke = node.small ? COL.constant_line : c.line;
    el("rect", { x: r.x, y: r.y, width: r.w, height: r.h, rx: 6, fill, stroke,
      "stroke-dasharray": node.context ? "4 3" : "none", "stroke-width": highlight === n ? 3 : 1.2 }, g);
    drawLines(leafSize("n" + n, current.notes).lines, r, g, node.small);
    el("title", {}, g, node.name + "\n" + node.type + (node.shapes ? "  " + node.shapes : ""));
    g.addEventListener("click", (ev) => { ev.stopPropagation(); showInfo(n); });
  }

  function drawFolded(b, r, parent) {
    const box = boxes[b];
    const c = kindColours(box.grad);
    const g = el("g", { class: "folded " + box.kind, "data-box": box.key }, parent);
    const stroke = box.kind === "frame" ? COL.frame : box.kind === "call" ? COL.call : c.line;
    el("rect", { x: r.x, y: r.y, width: r.w, height: r.h, rx: 7, fill: c.fill, stroke, "stroke-width": 2.4,
      "stroke-dasharray": box.kind === "frame" ? "6 3" : "none" }, g);
    el("text", { x: r.x + r.w - 7, y: r.y + 11, class: "plus" }, g, "+");
    drawLines(leafSize("b" + b, current.notes).lines, r, g, false);
    el("title", {}, g, box.key + " \u2014 " + summary(box) + " (click to open)");
    g.addEventListener("click", (ev) => { ev.stopPropagation(); toggle(b, ev); });
  }

  function gapBetween(a, b) {          // [horizontal gap, vertical gap] between two rects
    return [Math.max(a.x - b.x - b.w, b.x - a.x - a.w), Math.max(a.y - b.y - b.h, b.y - a.y - a.h)];
  }

  function edgePath(e) {
    const rs = current.abs.get(e.src), rd = current.abs.get(e.dst);
    const mid = current.absDummies.get(e.pair) || [];
    const [gx, gy] = gapBetween(rs, rd);
    if (!mid.length && gx > gy) {         // side by side: leave and enter sideways
      const right = rd.x > rs.x;
      const a = { x: right ? rs.x + rs.w : rs.x, y: rs.y + rs.h / 2 }, b = { x: right ? rd.x : rd.x + rd.w, y: rd.y + rd.h / 2 };
      const dx = (b.x - a.x) / 2;
      return { d: "M" + a.x.toFixed(1) + "," + a.y.toFixed(1) + " C" + (a.x + dx).toFixed(1) + "," + a.y.toFixed(1) + " " +
        (b.x - dx).toFixed(1) + "," + b.y.toFixed(1) + " " + b.x.toFixed(1) + "," + b.y.toFixed(1), pts: [a, b] };
    }
    const firstY = mid.length ? mid[0].y : rd.y + rd.h / 2;
    const lastY = mid.length ? mid[mid.length - 1].y : rs.y + rs.h / 2;
    const pts = [{ x: rs.x + rs.w / 2, y: firstY > rs.y + rs.h / 2 ? rs.y + rs.h : rs.y }];
    pts.push(...mid);
    pts.push({ x: rd.x + rd.w / 2, y: lastY > rd.y + rd.h / 2 ? rd.y + rd.h : rd.y });
    let d = "M" + pts[0].x.toFixed(1) + "," + pts[0].y.toFixed(1);
    for (let i = 1; i < pts.length; i++) {
      const a = pts[i - 1], b = pts[i], dy = (b.y - a.y) / 2;
      d += " C" + a.x.toFixed(1) + "," + (a.y + dy).toFixed(1) + " " + b.x.toFixed(1) + "," + (b.y - dy).toFixed(1) +
        " " + b.x.toFixed(1) + "," + b.y.toFixed(1);
    }
    return { d, pts };
  }

  function drawEdge(e, parent) {
    if (!current.abs.get(e.src) || !current.abs.get(e.dst)) return;
    const { d, pts } = edgePath(e);
    const width = e.count > 1 ? 1 + Math.min(3, Math.log2(e.count)) : 1;
    el("path", { d, class: e.control ? "edge control" : "edge", "stroke-width": width,
      "marker-end": e.control ? "url(#dot)" : "url(#arrow)" }, parent);
    const label = edgeLabel(e);
    if (label) {
      const m = pts[Math.floor(pts.length / 2)], m0 = pts[Math.floor(pts.length / 2) - 1] || m;
      el("text", { x: (m.x + m0.x) / 2 + 4, y: (m.y + m0.y) / 2, class: "elabel" }, parent, label);
    }
  }

  // -- interaction -------------------------------------------------------------------------
  function toggle(b, ev) {
    const before = ev ? current.abs.get("b" + b) : null;
    if (state.open.has(b)) closeBox(b); else openBox(b);
    draw();
    const after = current.abs.get("b" + b);
    if (before && after) {               // keep the clicked box under the pointer
      state.view.x += (before.x - after.x) * state.view.k;
      state.view.y += (before.y - after.y) * state.view.k;
      applyView();
    }
  }
  function openBox(b) {
    state.open.add(b);
    for (const c of boxes[b].boxes) if (boxes[c].kind === "function") state.open.add(c);
    // a box holding only one box opens through to something worth seeing
    soleMemo = new Map();
    let inner = boxes[b];
    for (let items = contents(inner); items.length === 1 && items[0][0] === "b" &&
      boxes[+items[0].slice(1)].kind !== "call"; items = contents(inner)) {
      state.open.add(+items[0].slice(1));
      inner = boxes[+items[0].slice(1)];
    }
  }
  function closeBox(b) {
    const stack = [b];
    while (stack.length) { const x = stack.pop(); state.open.delete(x); stack.push(...boxes[x].boxes); }
  }
  function openByKey(key) {
    const hit = boxes.findIndex((b) => b.key === key);
    if (hit < 0) return false;
    for (const c of chainOf(hit)) state.open.add(c);
    openBox(hit);
    return true;
  }

  function applyView() {
    const v = state.view;
    viewport.setAttribute("transform", "translate(" + v.x.toFixed(1) + "," + v.y.toFixed(1) + ") scale(" + v.k + ")");
  }
  function fit() {                      // the whole width, never magnified; a tall graph scrolls
    const W = svg.clientWidth;
    const k = Math.min(1, W / (current.root.w + 20));
    state.view = { k, x: Math.max(10, (W - current.root.w * k) / 2), y: 10 };
    applyView();
  }
  svg.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const v = state.view, f = Math.exp(-ev.deltaY * 0.0015);
    const k = Math.max(0.05, Math.min(4, v.k * f));
    const rect = svg.getBoundingClientRect(), px = ev.clientX - rect.left, py = ev.clientY - rect.top;
    v.x = px - (px - v.x) * (k / v.k); v.y = py - (py - v.y) * (k / v.k); v.k = k;
    applyView();
  }, { passive: false });
  let drag = null;
  svg.addEventListener("mousedown", (ev) => { drag = { x: ev.clientX, y: ev.clientY, vx: state.view.x, vy: state.view.y }; });
  window.addEventListener("mousemove", (ev) => {
    if (!drag) return;
    state.view.x = drag.vx + ev.clientX - drag.x; state.view.y = drag.vy + ev.clientY - drag.y;
    applyView();
  });
  window.addEventListener("mouseup", () => { drag = null; });

  let highlight = -1;
  function showInfo(n) {
    const node = nodes[n], info = document.getElementById("info");
    const ins = D.edges.filter((e) => e[1] === n).map((e) => (e[4] ? "^" : "") + nodes[e[0]].name + (e[4] ? "" : ":" + e[2]));
    const outs = D.edges.filter((e) => e[0] === n).map((e) => nodes[e[1]].name);
    info.textContent = "";
    const add = (label, text) => { const p = document.createElement("div"); p.innerHTML = "<b></b> "; p.firstChild.textContent = label; p.append(text); info.appendChild(p); };
    add("name", node.name); add("op", node.type + (node.kind ? " (gradient)" : ""));
    add("outputs", node.shapesAll || "none");
    if (node.calls) add("calls", node.calls);
    add("inputs", ins.join(", ") || "none"); add("used by", [...new Set(outs)].join(", ") || "nothing");
    info.style.display = "block";
  }
  document.getElementById("info").addEventListener("click", (ev) => { ev.currentTarget.style.display = "none"; });

  let searchFrom = 0;
  function search(text) {
    const q = text.toLowerCase();
    if (!q) return;
    for (let i = 0; i < nodes.length; i++) {
      const n = (searchFrom + i) % nodes.length;
      if (nodes[n].name.toLowerCase().includes(q)) {
        searchFrom = n + 1;
        if (hidden(n)) { state.plumbing = true; document.getElementById("plumbing").checked = true; }
        for (const b of nodeChain[n]) state.open.add(b);
        highlight = n;
        draw();
        const r = current.abs.get("n" + n);
        state.view.x = svg.clientWidth / 2 - (r.x + r.w / 2) * state.view.k;
        state.view.y = svg.clientHeight / 2 - (r.y + r.h / 2) * state.view.k;
        applyView();
        showInfo(n);
        return;
      }
    }
    document.getElementById("search").classList.add("miss");
  }
  document.getElementById("search").addEventListener("keydown", (ev) => {
    ev.currentTarget.classList.remove("miss");
    if (ev.key === "Enter") search(ev.currentTarget.value);
  });
  document.getElementById("fold-all").addEventListener("click", () => { state.open = new Set([0]); draw(); fit(); });
  document.getElementById("open-level").addEventListener("click", () => {
    for (const b of [...state.open]) for (const c of boxes[b].boxes) if (boxes[c].kind !== "call") state.open.add(c);
    draw();
  });
  document.getElementById("fit").addEventListener("click", fit);
  const plumbingSwitch = document.getElementById("plumbing");
  plumbingSwitch.checked = state.plumbing;
  plumbingSwitch.addEventListener("change", () => {
    // boxes that were not drawn (holding nothing but plumbing, or one op drawn for the box) appear open
    const unseen = boxes.map((box, b) => b > 0 && (box.live === 0 || soleNode(b) >= 0));
    state.plumbing = plumbingSwitch.checked;
    if (state.plumbing) unseen.forEach((yes, b) => { if (yes) state.open.add(b); });
    draw();
  });

  // #open=KEY,KEY opens boxes by key (a link can share a view); window.gradregView for scripts
  const hash = decodeURIComponent(location.hash.slice(1));
  if (hash.startsWith("open=")) for (const key of hash.slice(5).split(",")) openByKey(key);
  window.gradregView = { state, draw, openByKey, toggle, layout: () => current };
  draw();
  fit();
  document.body.setAttribute("data-ready", "1");
})();
