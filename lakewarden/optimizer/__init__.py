"""optimizer layer of lakewarden (see DESIGN.md)."""
