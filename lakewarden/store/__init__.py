"""store layer of lakewarden (see DESIGN.md)."""
