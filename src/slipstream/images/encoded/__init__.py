"""Encoded images: ``codecs`` (raw, JPEG, PNG, QOI: encode, decode, resize at write time) and
``headers`` (what an encoded image's header declares, and whether its bytes can hold it).

Below the packed-file format (``files.field_image`` stores images through it) and above nothing
but ``core``: it imports no other image module.
"""
