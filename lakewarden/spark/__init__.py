"""spark layer of lakewarden (see DESIGN.md)."""
