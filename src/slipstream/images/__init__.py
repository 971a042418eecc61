"""Images: everything pixel work needs, from encoded bytes to a batch slot, on the CPU or a device.

``encoded`` (codecs and headers: below the file format), ``imageops`` (the operations of ``.map``
pipelines; ``slipstream.ops`` is their public name), ``pipeline`` (pipelines that decode a crop
window and resample it into a batch slot), ``placement`` (where each window lies in the decoded
pixels), ``imagetasks`` (a chunk of a batch through a pipeline in one compiled call),
``image_index`` (per-sample arrays of one image field over a whole file), ``mapfields``
(``ss.open(p).map(image=[ops...])``: fields through pipelines), ``kernels`` (the pixel kernels)
and ``device`` (the same work batched on a torch device), with the ``_roijpeg`` C extension (the
JPEG region decoder).
"""
