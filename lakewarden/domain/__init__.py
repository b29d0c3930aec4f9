"""domain layer of lakewarden (see DESIGN.md)."""
