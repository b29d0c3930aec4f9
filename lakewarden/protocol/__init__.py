"""The protocol between the server and its optimizers: what a task asks for and what it reports.

Each action has its own task input and its own result, frozen pydantic models discriminated by
`action` (the shape of pyiceberg's TableUpdate models). The planner and the process factories build
inputs, the server stores them (as JSON) and hands them out, the optimizer runs them and reports a
result of the same action, and the factories merge results into a process summary field by field.
Inputs in `inputs.py`, results in `results.py`, the messages that carry them in `messages.py`. The
server and the optimizer both import this package; it imports nothing else of lakewarden's.
"""
