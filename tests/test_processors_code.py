"""Source code: symbol chunks checked against the running interpreter's standard library.

Python line numbers are compared with ``inspect.getsourcelines`` on the real modules; the
brace-language scanner is checked on small programs with known line numbers and on a
real Go file.
"""

from __future__ import annotations

import argparse
import inspect
import json.decoder
import re
import sysconfig
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.feature_extraction.text import TfidfVectorizer
from test_processors_support import check_document

from knowledge_agent.analysis import TextAnalyzer
from knowledge_agent.chunking import ChunkConfig
from knowledge_agent.errors import UnsupportedSourceError
from knowledge_agent.models import KnowledgeChunk
from knowledge_agent.processors import ProcessedDocument, process_bytes, process_file

STDLIB = Path(sysconfig.get_paths()["stdlib"])
DATA = Path(__file__).parent / "data"
SYMBOL_KEYS = {
    "symbol",
    "qualified_name",
    "symbol_type",
    "parent_symbol",
    "signature",
    "docstring",
    "symbol_start_line",
    "symbol_end_line",
}


def process_module(module: types.ModuleType) -> ProcessedDocument:
    path = inspect.getsourcefile(module)
    assert path is not None
    return process_file(path)


@pytest.fixture(scope="module")
def stdlib_documents() -> dict[str, ProcessedDocument]:
    return {m.__name__: process_module(m) for m in (argparse, json.decoder, textwrap)}


def symbol_chunks(document: ProcessedDocument, qualified_name: str) -> list[KnowledgeChunk]:
    return [c for c in document.chunks if c.metadata.get("qualified_name") == qualified_name]


def source_lines(obj: Any) -> tuple[int, int]:
    lines, start = inspect.getsourcelines(obj)
    return start, start + len(lines) - 1


def resolve(module: types.ModuleType, qualified_name: str) -> Any:
    obj: Any = module
    for part in qualified_name.split("."):
        obj = inspect.getattr_static(obj, part, None)
        if obj is None:
            return None
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        obj = obj.fget
    return obj


# --------------------------------------------------------------------------- Python, stdlib


def test_stdlib_documents_hold_the_invariants(
    stdlib_documents: dict[str, ProcessedDocument],
) -> None:
    for name, document in stdlib_documents.items():
        assert document.source_type == "code"
        assert document.language == "python"
        assert document.content_type == "text/x-python"
        assert document.metadata["parser"] == "ast"
        assert document.title == Path(inspect.getsourcefile(resolve_module(name)) or "").name
        check_document(document)


def resolve_module(name: str) -> types.ModuleType:
    return {m.__name__: m for m in (argparse, json.decoder, textwrap)}[name]


@pytest.mark.parametrize(
    ("module", "qualified_name", "symbol_type"),
    [
        (argparse, "ArgumentParser.parse_args", "method"),
        (argparse, "ArgumentParser.parse_known_args", "method"),
        (argparse, "HelpFormatter._format_usage", "method"),
        (argparse, "_ActionsContainer.add_argument", "method"),
        (argparse, "_copy_items", "function"),
        (json.decoder, "JSONDecoder.raw_decode", "method"),
        (json.decoder, "JSONDecoder.decode", "method"),
        (json.decoder, "py_scanstring", "function"),
        (json.decoder, "JSONObject", "function"),
        (textwrap, "dedent", "function"),
        (textwrap, "TextWrapper._handle_long_word", "method"),  # ends with indented comments
        (textwrap, "TextWrapper.wrap", "method"),
    ],
)
def test_function_lines_match_inspect(
    stdlib_documents: dict[str, ProcessedDocument],
    module: types.ModuleType,
    qualified_name: str,
    symbol_type: str,
) -> None:
    chunks = symbol_chunks(stdlib_documents[module.__name__], qualified_name)
    assert chunks, qualified_name
    start, end = source_lines(resolve(module, qualified_name))
    first = chunks[0]
    assert first.metadata["symbol_type"] == symbol_type
    assert (first.metadata["symbol_start_line"], first.metadata["symbol_end_line"]) == (start, end)
    assert first.metadata["start_line"] == start
    assert chunks[-1].metadata["end_line"] == end
    name = qualified_name.rsplit(".", 1)[-1]
    assert f"def {name}(" in first.content
    assert first.heading == qualified_name.replace(".", " > ")
    assert all(name in c.metadata["symbols"] for c in chunks for name in [qualified_name])


@pytest.mark.parametrize(
    ("module", "qualified_name"),
    [
        (argparse, "ArgumentParser"),
        (argparse, "HelpFormatter"),
        (argparse, "Namespace"),
        (json.decoder, "JSONDecoder"),
        (json.decoder, "JSONDecodeError"),
        (textwrap, "TextWrapper"),
    ],
)
def test_class_lines_match_inspect(
    stdlib_documents: dict[str, ProcessedDocument], module: types.ModuleType, qualified_name: str
) -> None:
    chunks = symbol_chunks(stdlib_documents[module.__name__], qualified_name)
    start, end = source_lines(resolve(module, qualified_name))
    header = chunks[0]
    assert header.metadata["symbol_type"] == "class"
    assert (header.metadata["symbol_start_line"], header.metadata["symbol_end_line"]) == (
        start,
        end,
    )
    assert header.metadata["start_line"] == start
    assert header.content.startswith(f"class {qualified_name}")
    assert "    def " not in header.content.split("\n", 1)[0]
    methods = [
        c
        for c in stdlib_documents[module.__name__].chunks
        if c.metadata.get("parent_symbol") == qualified_name
    ]
    assert methods, "methods are chunks of their own"
    assert all(m.start_position >= header.end_position for m in methods)


def test_every_stdlib_symbol_matches_inspect(
    stdlib_documents: dict[str, ProcessedDocument],
) -> None:
    checked = 0
    for name, document in stdlib_documents.items():
        module = resolve_module(name)
        for chunk in document.chunks:
            metadata = chunk.metadata
            if "qualified_name" not in metadata or metadata["symbol_type"] == "module":
                continue  # a merged chunk, or module-level code
            obj = resolve(module, metadata["qualified_name"])
            if obj is None or getattr(obj, "__module__", None) != name:
                continue  # conditionally defined, or re-exported from elsewhere
            if inspect.unwrap(obj) is not obj:
                continue
            start, end = source_lines(obj)
            assert (metadata["symbol_start_line"], metadata["symbol_end_line"]) == (start, end), (
                metadata["qualified_name"]
            )
            checked += 1
    assert checked > 150


@pytest.mark.parametrize(
    ("module", "qualified_name", "signature"),
    [
        (argparse, "ArgumentParser.parse_args", "def parse_args(self, args=None, namespace=None)"),
        (argparse, "ArgumentParser", "class ArgumentParser(_AttributeHolder, _ActionsContainer)"),
        (argparse, "_ActionsContainer.add_argument", "def add_argument(self, *args, **kwargs)"),
        (json.decoder, "JSONDecoder.raw_decode", "def raw_decode(self, s, idx=0)"),
        (json.decoder, "JSONDecoder", "class JSONDecoder(object)"),
        (textwrap, "dedent", "def dedent(text)"),
        (textwrap, "TextWrapper._split", "def _split(self, text)"),
    ],
)
def test_signatures(
    stdlib_documents: dict[str, ProcessedDocument],
    module: types.ModuleType,
    qualified_name: str,
    signature: str,
) -> None:
    chunk = symbol_chunks(stdlib_documents[module.__name__], qualified_name)[0]
    assert chunk.metadata["signature"] == signature
    obj = resolve(module, qualified_name)
    if inspect.isfunction(obj):
        assert signature == f"def {obj.__name__}{inspect.signature(obj)}"


@pytest.mark.parametrize(
    ("module", "qualified_name"),
    [
        (json.decoder, "JSONDecoder.raw_decode"),
        (json.decoder, "JSONDecoder"),
        (textwrap, "dedent"),
        (argparse, "ArgumentParser.parse_known_args"),
        (argparse, "HelpFormatter"),
    ],
)
def test_docstrings_are_the_first_paragraph(
    stdlib_documents: dict[str, ProcessedDocument], module: types.ModuleType, qualified_name: str
) -> None:
    chunk = symbol_chunks(stdlib_documents[module.__name__], qualified_name)[0]
    doc = inspect.getdoc(resolve(module, qualified_name)) or ""
    expected = " ".join(doc.split("\n\n")[0].split())
    assert chunk.metadata["docstring"] == expected[:300] or (
        len(expected) > 300 and chunk.metadata["docstring"].endswith("…")
    )
    assert set(chunk.metadata) >= SYMBOL_KEYS | {"symbols", "start_line", "end_line"}


def test_module_chunk_heading_and_docstring(stdlib_documents: dict[str, ProcessedDocument]) -> None:
    document = stdlib_documents["json.decoder"]
    first = document.chunks[0]
    assert first.heading == "decoder"
    assert first.metadata["symbol_type"] == "module"
    assert first.metadata["docstring"] == "Implementation of JSONDecoder"
    assert first.content.startswith('"""Implementation of JSONDecoder')
    assert "import re" in first.content
    assert document.metadata["docstring"] == "Implementation of JSONDecoder"


def test_package_init_module_is_named_after_the_package() -> None:
    document = process_file(STDLIB / "json" / "__init__.py")
    assert document.chunks[0].heading == "json"
    assert symbol_chunks(document, "dumps")[0].heading == "dumps"


def test_a_function_name_query_ranks_its_definition_first(
    stdlib_documents: dict[str, ProcessedDocument],
) -> None:
    """The symbol name is in the heading, which the search text weighs: a TF-IDF proxy."""
    chunks = stdlib_documents["argparse"].chunks
    vectorizer = TfidfVectorizer(analyzer=TextAnalyzer())
    matrix = vectorizer.fit_transform([f"{c.heading}\n{c.heading}\n{c.content}" for c in chunks])
    for name in ("add_subparsers", "print_usage", "_get_values", "_parse_optional"):
        scores = (matrix @ vectorizer.transform([name]).T).toarray().ravel()
        best = chunks[int(scores.argmax())]
        assert best.metadata["qualified_name"].endswith(f".{name}"), name
        definition = symbol_chunks(stdlib_documents["argparse"], best.metadata["qualified_name"])
        assert f"def {name}(" in definition[0].content
    assert "parse_known_args" in TextAnalyzer().terms("ArgumentParser > parse_known_args")


PACKAGES = ("json", "email", "importlib", "logging", "concurrent", "urllib", "http", "wsgiref")


def test_stdlib_smoke_packages() -> None:
    """Every .py file of several packages: invariants hold and Python is read with ast."""
    files = sorted(path for package in PACKAGES for path in (STDLIB / package).rglob("*.py"))
    assert len(files) > 60
    symbols = 0
    for path in files:
        if not path.read_bytes().strip():
            with pytest.raises(UnsupportedSourceError, match="empty file"):
                process_file(path)
            continue
        document = process_file(path)
        check_document(document)
        assert document.metadata["parser"] == "ast", path
        for chunk in document.chunks:
            assert chunk.metadata["start_line"] <= chunk.metadata["end_line"]
            if "symbol_start_line" in chunk.metadata:
                assert (
                    chunk.metadata["symbol_start_line"]
                    <= chunk.metadata["start_line"]
                    <= chunk.metadata["end_line"]
                    <= chunk.metadata["symbol_end_line"]
                )
                symbols += 1
    assert symbols > 1000


# --------------------------------------------------------------------------- Python, synthetic

SMALL_FUNCTIONS = '''\
"""Tiny helpers."""


def one():
    return 1


def two():
    return 2


def three():
    return 3


class Big:
    """A class with a long method."""

    @staticmethod
    def long_method(values):
''' + "".join(f"        values.append({i} * {i})  # step {i}\n" for i in range(60))


def test_small_functions_merge_and_big_ones_are_windowed() -> None:
    document = process_bytes(SMALL_FUNCTIONS.encode(), "pkg/helpers.py")
    merged = document.chunks[0]
    # The class header is small too, so it joins the small functions before it.
    assert merged.heading == "helpers, one, two, three, Big"
    assert merged.metadata["symbols"] == ["one", "two", "three", "Big"]
    assert "symbol" not in merged.metadata, "only entries all merged sections share"
    pieces = symbol_chunks(document, "Big.long_method")
    assert len(pieces) > 1
    assert all(p.heading == "Big > long_method" for p in pieces)
    assert pieces[0].metadata["symbol_type"] == "staticmethod"
    assert pieces[0].content.startswith("@staticmethod\n    def long_method(values):")
    assert all(len(p.content) <= 1500 for p in pieces)
    check_document(document)


def test_python_that_does_not_parse_uses_the_indentation_scanner() -> None:
    source = (
        "import sys\n\n"
        "class Legacy:\n"
        "    def show(self, value):\n"
        "        print 'value', value\n"
        "        return value\n\n"
        "    @property\n"
        "    def name(self):\n"
        "        return 'x'\n\n"
        "def main():\n"
        "    def inner():\n"
        "        pass\n"
        "    print >>sys.stderr, 'done'\n"
    )
    document = process_bytes(source.encode(), "legacy.py", ChunkConfig(min_chunk_size=10))
    assert document.metadata["parser"] == "indentation"
    found = {
        c.metadata["qualified_name"]: (
            c.metadata["symbol_start_line"],
            c.metadata["symbol_end_line"],
        )
        for c in document.chunks
        if c.metadata.get("symbol_type") not in (None, "module")
    }
    assert found == {
        "Legacy": (3, 10),
        "Legacy.show": (4, 6),
        "Legacy.name": (8, 10),
        "main": (12, 15),
    }
    check_document(document)


def test_shebang_script_without_extension_is_python() -> None:
    source = "#!/usr/bin/env python3\n\ndef main():\n    return 0\n"
    document = process_bytes(source.encode(), "bin/tool")
    assert (document.source_type, document.language) == ("code", "python")
    assert document.chunks[0].metadata["symbols"] == ["main"]


def test_other_languages_are_split_at_blank_lines() -> None:
    blocks = [f"echo step {i}\nrun_task --number {i} --verbose\n" * 6 for i in range(12)]
    source = "#!/bin/sh\n" + "\n".join(blocks)
    document = process_bytes(source.encode(), "deploy.sh")
    assert document.language == "shell"
    assert document.content_type == "text/x-shellscript"
    assert document.metadata["parser"] == "lines"
    assert len(document.chunks) > 1
    for chunk in document.chunks:
        assert "symbols" not in chunk.metadata
        assert chunk.content.endswith("--verbose"), "cut at blank lines"
    check_document(document)


# --------------------------------------------------------------------------- brace languages


def scanned(document: ProcessedDocument) -> dict[str, dict[str, Any]]:
    """qualified name → metadata of the symbol's first chunk."""
    found: dict[str, dict[str, Any]] = {}
    for chunk in document.chunks:
        name = chunk.metadata.get("qualified_name")
        if name and chunk.metadata["symbol_type"] != "module":
            found.setdefault(name, chunk.metadata)
    return found


def lines_of(found: dict[str, dict[str, Any]]) -> dict[str, tuple[str, int, int]]:
    return {
        name: (m["symbol_type"], m["symbol_start_line"], m["symbol_end_line"])
        for name, m in found.items()
    }


SMALL = ChunkConfig(min_chunk_size=1, max_chunk_size=1500)

JAVASCRIPT = """\
import { x } from "./x.js";

/**
 * Adds two numbers.
 */
export function add(a, b) {
  const text = "not a } brace";
  return a + b; // } neither
}

export const twice = (n) => {
  return n * 2;
};

const square = n => n * n;

export default class Counter extends Base {
  #count = 0;

  constructor(start) {
    super();
    this.#count = start;
  }

  async increment(step = 1) {
    this.#count += step;
  }

  get value() {
    return this.#count;
  }

  reset = () => {
    this.#count = 0;
  };
}

if (x) {
  function hidden() {}
}
"""


def test_javascript_symbols() -> None:
    document = process_bytes(JAVASCRIPT.encode(), "src/counter.js", SMALL)
    assert document.language == "javascript"
    found = scanned(document)
    assert lines_of(found) == {
        "add": ("function", 3, 9),
        "twice": ("function", 11, 13),
        "square": ("function", 15, 15),
        "Counter": ("class", 17, 36),
        "Counter.constructor": ("method", 20, 23),
        "Counter.increment": ("async_method", 25, 27),
        "Counter.value": ("method", 29, 31),
        "Counter.reset": ("method", 33, 35),
    }
    assert found["add"]["docstring"] == "Adds two numbers."
    assert found["add"]["signature"] == "export function add(a, b)"
    assert found["Counter.increment"]["parent_symbol"] == "Counter"
    check_document(document)


TYPESCRIPT = """\
export interface Shape {
  area(): number;
}

export type Id = string | number;

export enum Color { Red, Green }

export abstract class Square implements Shape {
  constructor(private side: number) {}

  public area(): number {
    return this.side ** 2;
  }

  protected abstract name(): string;
}

export async function load<T>(url: string): Promise<T> {
  return (await fetch(url)).json();
}
"""


def test_typescript_symbols() -> None:
    document = process_bytes(TYPESCRIPT.encode(), "shapes.ts", SMALL)
    assert (document.language, document.content_type) == ("typescript", "text/x-typescript")
    assert lines_of(scanned(document)) == {
        "Shape": ("interface", 1, 3),
        "Id": ("type", 5, 5),
        "Color": ("enum", 7, 7),
        "Square": ("class", 9, 17),
        "Square.constructor": ("method", 10, 10),
        "Square.area": ("method", 12, 14),
        "Square.name": ("method", 16, 16),
        "load": ("async_function", 19, 21),
    }


GO = """\
package store

import "fmt"

// Store keeps values.
// It is safe for concurrent use.
type Store struct {
	items map[string]string
}

type ID int

// Get returns the value for key.
func (s *Store) Get(key string) (string, error) {
	if v, ok := s.items[key]; ok {
		return v, nil
	}
	return "", fmt.Errorf("missing {%s}", key)
}

func New() *Store {
	return &Store{items: map[string]string{}}
}
"""


def test_go_symbols() -> None:
    document = process_bytes(GO.encode(), "store.go", SMALL)
    found = scanned(document)
    assert lines_of(found) == {
        "Store": ("struct", 5, 9),
        "ID": ("type", 11, 11),
        "Store.Get": ("method", 13, 19),
        "New": ("function", 21, 23),
    }
    assert found["Store"]["docstring"] == "Store keeps values. It is safe for concurrent use."
    assert found["Store.Get"]["signature"] == "func (s *Store) Get(key string) (string, error)"
    assert found["Store.Get"]["parent_symbol"] == "Store"
    heading = next(c.heading for c in document.chunks if "func (s *Store) Get" in c.content)
    assert heading == "Store > Get"


RUST = """\
//! Crate docs.

use std::fmt;

/// A point in the plane.
#[derive(Debug, Clone)]
pub struct Point<'a> {
    pub label: &'a str,
}

impl<'a> fmt::Display for Point<'a> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{{{}}}", self.label)
    }
}

pub trait Shape {
    fn area(&self) -> f64;
}

pub(crate) async fn fetch(url: &str) -> Result<String, Error> {
    let c = '{';
    Ok(format!("{}{}", url, c))
}

macro_rules! square {
    ($x:expr) => { $x * $x };
}
"""


def test_rust_symbols() -> None:
    document = process_bytes(RUST.encode(), "src/lib.rs", SMALL)
    found = scanned(document)
    assert lines_of(found) == {
        "Point": ("struct", 5, 9),  # doc comment and attribute included
        "Point.fmt": ("method", 12, 14),
        "Shape": ("trait", 17, 19),
        "Shape.area": ("method", 18, 18),
        "fetch": ("async_function", 21, 24),
        "square": ("macro", 26, 28),
    }
    assert found["Point"]["docstring"] == "A point in the plane."
    assert found["Point"]["signature"] == "pub struct Point<'a>"
    impl = next(c for c in document.chunks if c.metadata.get("symbol_type") == "impl")
    assert (impl.metadata["symbol_start_line"], impl.metadata["symbol_end_line"]) == (11, 15)
    assert impl.metadata["signature"] == "impl<'a> fmt::Display for Point<'a>"
    assert impl.heading == "Point"


JAVA = """\
package demo;

import java.util.List;

/** A greeter. */
public class Greeter implements Runnable {
    private final List<String> names = new java.util.ArrayList<>();

    public Greeter(String first) {
        names.add(first);
    }

    @Override
    public void run() {
        for (String name : names) {
            System.out.println("Hello {" + name + "}");
        }
    }

    static <T> List<T> copy(List<T> items) { return items; }

    interface Listener {
        void onGreet(String name);
    }
}
"""


def test_java_symbols() -> None:
    document = process_bytes(JAVA.encode(), "Greeter.java", SMALL)
    found = scanned(document)
    assert lines_of(found) == {
        "Greeter": ("class", 5, 25),
        "Greeter.Greeter": ("method", 9, 11),
        "Greeter.run": ("method", 13, 18),
        "Greeter.copy": ("method", 20, 20),
        "Greeter.Listener": ("interface", 22, 24),
        "Greeter.Listener.onGreet": ("method", 23, 23),
    }
    assert found["Greeter"]["docstring"] == "A greeter."
    assert found["Greeter.run"]["signature"] == "public void run()"


C_SOURCE = """\
#include <stdio.h>

/* A counter. */
typedef struct {
    int value;
} counter_t;

struct node;

static int add(int a, int b);

/* Add two numbers; braces in "strings {" do not count. */
static int
add(int a, int b)
{
    const char *s = "}";
    return a + b;
}

int main(void) {
    counter_t c = { 0 };
    printf("%d\\n", add(c.value, 1));
    return 0;
}
"""


def test_c_symbols() -> None:
    document = process_bytes(C_SOURCE.encode(), "main.c", SMALL)
    found = scanned(document)
    assert lines_of(found) == {
        "counter_t": ("struct", 3, 6),
        "add": ("function", 12, 18),
        "main": ("function", 20, 24),
    }
    assert found["add"]["signature"] == "static int add(int a, int b)"
    assert found["add"]["docstring"] == 'Add two numbers; braces in "strings {" do not count.'


CPP = """\
namespace geo {

class Circle : public Shape {
public:
    explicit Circle(double r) : r_(r) {}
    double area() const override {
        return 3.14 * r_ * r_;
    }
    double perimeter() const;
private:
    double r_;
};

double Circle::perimeter() const {
    return 2 * 3.14 * r_;
}

}  // namespace geo
"""


def test_cpp_symbols() -> None:
    document = process_bytes(CPP.encode(), "circle.cpp", SMALL)
    assert document.language == "cpp"
    assert lines_of(scanned(document)) == {
        "geo": ("namespace", 1, 18),
        "geo.Circle": ("class", 3, 12),
        "geo.Circle.Circle": ("method", 5, 5),
        "geo.Circle.area": ("method", 6, 8),
        "geo.Circle.perimeter": ("method", 14, 16),
    }


def test_real_go_file() -> None:
    document = process_file(DATA / "persistent-https-proxy.go")
    assert (document.language, document.metadata["parser"]) == ("go", "scanner")
    found = lines_of(scanned(document))
    assert found["Proxy"] == ("struct", 31, 39)
    assert found["socketContext.Done"] == ("method", 104, 109)
    assert found["Proxy.closeOnSignal"] == ("method", 179, 190)
    assert {name for name in found if name.startswith("Proxy.")} == {
        "Proxy.Run",
        "Proxy.serveUnix",
        "Proxy.handleUnixConn",
        "Proxy.closeOnIdle",
        "Proxy.closeOnUpdate",
        "Proxy.closeOnSignal",
    }
    license_chunk = document.chunks[0]
    assert license_chunk.heading == "persistent-https-proxy"
    assert "Apache License" in license_chunk.content
    check_document(document)


# --------------------------------------------------------------------------- properties

python_blocks = st.sampled_from(
    [
        "import os\n",
        "# a comment\n",
        "\n",
        "CONSTANT = {'a': 1}\n",
        "def plain(x):\n    return x\n",
        "async def fetch(url):\n    '''Fetch it.'''\n    return url\n",
        "@decorator\ndef wrapped():\n    pass\n",
        "class Thing(Base):\n    '''A thing.'''\n    size = 3\n\n"
        "    def method(self):\n        return self.size\n\n"
        "    @property\n    def name(self):\n        return 'n'\n",
        "if DEBUG:\n    def debug_only():\n        pass\n",
        "def outer():\n    def inner():\n        pass\n    return inner\n",
        "def long_one():\n" + "    value = compute(value)  # keep going\n" * 30,
    ]
)


@settings(max_examples=60, deadline=None)
@given(
    blocks=st.lists(python_blocks, min_size=1, max_size=12),
    config=st.sampled_from(
        [
            ChunkConfig(),
            ChunkConfig(min_chunk_size=20, max_chunk_size=300),
            ChunkConfig(strategy="lines", chunk_size=5, chunk_overlap=1),
            ChunkConfig(strategy="tokens", chunk_size=40, chunk_overlap=8),
        ]
    ),
)
def test_generated_python_symbol_chunks(blocks: list[str], config: ChunkConfig) -> None:
    source = "\n".join(blocks)
    if not source.strip():
        return
    document = process_bytes(source.encode(), "generated.py", config)
    assert document.metadata["parser"] == "ast"
    check_document(document)
    lines = source.split("\n")
    for chunk in document.chunks:
        metadata = chunk.metadata
        if "symbol_start_line" not in metadata:
            continue  # module code, or a merge of several symbols
        first = lines[metadata["symbol_start_line"] - 1].strip()
        assert first.startswith(("@", "def ", "async def ", "class ")), first
        name = metadata["symbol"]
        assert re.search(
            rf"\b(def|class) {name}\b",
            "\n".join(lines[metadata["symbol_start_line"] - 1 : metadata["symbol_end_line"]]),
        )
        assert metadata["symbol_start_line"] <= metadata["start_line"]
        assert metadata["end_line"] <= metadata["symbol_end_line"]
        assert metadata["qualified_name"] in metadata["symbols"]
    assert "inner" not in {c.metadata.get("symbol") for c in document.chunks}
