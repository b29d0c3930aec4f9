"""Java classes as the optimizer reaches them through py4j, each resolved once per JVM.

py4j resolves `jvm.org.apache.x.Y` one name part at a time: every part is a round trip in which the JVM tries the
name so far as a class, and for each package prefix that fails after searching every jar of the class path. A task
names a dozen classes per file group, so that search would cost more than the calls themselves. A class named in
full is found in one round trip, and kept: the next use is a plain call.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

_lock = threading.Lock()
# by JVM view (one per gateway): a new SparkContext's classes are its own
_known: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def java_class(jvm: Any, name: str) -> Any:
    """The py4j class `name` (its full name; a nested class as `Outer$Inner`) of the JVM that `jvm` views."""
    with _lock:
        classes = _known.setdefault(jvm, {})
        found = classes.get(name)
    if found is None:
        from py4j.java_gateway import JavaClass

        found = getattr(jvm, name)
        if not isinstance(found, JavaClass):
            raise LookupError(f"no Java class {name}")
        with _lock:
            classes[name] = found
    return found
