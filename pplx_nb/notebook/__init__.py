"""The notebook face of pplx_nb: magics (``magics``), rendering (``display``) and widgets.

Nothing is imported here, so ``%load_ext pplx_nb`` pays only for ``magics``.
"""
