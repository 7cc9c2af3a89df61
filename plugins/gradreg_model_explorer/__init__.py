"""gradreg's adapter extension for Google's Model Explorer (``pip install "gradreg[explorer]"``).

    model-explorer model.onnx --extensions=gradreg_model_explorer
    model-explorer export_dir/saved_model.pb model.pbtxt --extensions=gradreg_model_explorer

Model Explorer imports ``gradreg_model_explorer.main`` for ``--extensions=gradreg_model_explorer``
and offers its adapter, "gradreg", for GraphDef (.pb, .pbtxt), ONNX (.onnx) and SavedModel
(``saved_model.pb`` in its directory: the signature ``serving_default``, or the only one,
with its functions inlined) files. The graph is what ``gradreg view`` and ``gradreg explorer``
show (gradreg.viz.explorer). For a .pb file Model Explorer's own GraphDef adapter comes first:
pick "gradreg" in the adapter menu of its start page. The gradient overlays are node-data
files ``gradreg explorer`` writes; load them from Model Explorer's node-data menu.

This package is imported only by Model Explorer: gradreg itself never imports it.
"""
