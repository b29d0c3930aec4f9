"""cli layer of lakewarden (see DESIGN.md)."""
