"""api layer of lakewarden (see DESIGN.md)."""
