"""``slipstream.fields`` (``from slipstream import fields as F``): the kinds of field a packed file stores.

Each field owns its Arrow column type, its encoder and its decoder; ``ss.write(path, data,
fields={"image": F.Image(codec="jpeg"), "label": F.Int()})``. The kinds live in
``slipstream.files.field_kinds`` (scalars, bytes, text, JSON) and ``slipstream.files.field_array``,
``field_image``, ``field_tokens``; this module is their public name.
"""

from .files.field_kinds import JSON, Array, Bool, Bytes, Field, Float, Image, Int, Text, Tokens, field_from_spec

__all__ = ["JSON", "Array", "Bool", "Bytes", "Field", "Float", "Image", "Int", "Text", "Tokens", "field_from_spec"]
