"""The docs' ROS examples, collected for the tests that check them the way ROS reads them
(test_docs_params.py: rcl's parsers and the node's declarations; test_ros_docs_yaml.py: the
node started with each complete params file).

Every Markdown file of the docs is read: README.md and docs/**/*.md, whatever their sections
(markdown-it-py, a CommonMark parser, finds the fenced blocks, inline code and HTML comments).
Collected from them:

- **Params files**: every fenced block whose language is ``yaml``/``yml``, and every fenced
  block of any language that holds ``ros__parameters:``.
- **ROS command lines**: in ``bash``/``sh``/``shell``/``console`` blocks (and blocks with no
  language), every command (``\\``-continued lines joined, a leading ``$`` prompt dropped) with
  ``--ros-args``: rcl's arguments are the words from ``--ros-args`` to the end of the command
  (``;``, ``&&``, ``|`` or ``&`` end it). In inline code: a span that starts with ``--ros-args``,
  ``-p `` or ``--param ``, and a span ``name:=value`` (checked as ``-p name:=value``); a span
  ``name:=`` with no value names an argument and is not an example.
- **Launch commands**: ``ros2 launch <package> <file> name:=value...``.

A params block can be marked by an HTML comment (invisible when the Markdown is rendered) on
the line right before its opening fence::

    <!-- docs-check: no-start (needs an edge server) -->

- no mark: a whole params file. rcl must parse it, the node's declarations must accept every
  value and name, and the node must start with it, verbatim, and publish on every binding.
- ``no-start (reason)``: a whole params file that cannot be started here (e.g. it needs an
  edge server or a robot's own files): rcl must parse it and the node's declarations must
  accept it (absolute paths of ``*_file`` parameters that do not exist here, and variables named
  by ``*_env`` parameters, are stood in for), but it is not started.
- ``fragment (reason)``: deliberately partial (a few keys of a binding, say): rcl must parse
  it; without ``ros__parameters`` it is first placed under ``/**: ros__parameters:``. Its names
  and values are not checked against the declarations.
- ``not-params (reason)``: YAML that is not a ROS params file (a Kubernetes manifest, say):
  not given to rcl.

A YAML block with no mark and no ``ros__parameters`` is an error: mark it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]
MARK = re.compile(r"^<!--\s*docs-check:\s*([\w-]+)\s*(?:\((.*)\))?\s*-->\s*$", re.S)
KINDS = ("params", "no-start", "fragment", "not-params")
SHELL = {"", "bash", "sh", "shell", "console", "zsh"}
INLINE_ASSIGNMENT = re.compile(r"^[A-Za-z_][\w./*]*:=(.*)$", re.S)


def doc_files(root: Path = ROOT) -> list[Path]:
    """README.md and every Markdown file below docs/."""
    files = [root / "README.md"] if (root / "README.md").is_file() else []
    return files + sorted((root / "docs").rglob("*.md"))


@dataclass(frozen=True)
class ParamsSnippet:
    where: str  # "README.md:347": the line of the opening fence
    text: str  # the block's text, verbatim
    kind: str  # one of KINDS ("params" when unmarked)
    reason: str = ""


@dataclass(frozen=True)
class RosArgsExample:
    where: str
    args: tuple[str, ...]  # from "--ros-args" on, as a shell would split them


@dataclass(frozen=True)
class LaunchExample:
    where: str
    package: str
    launch_file: str
    arguments: tuple[tuple[str, str], ...]


@dataclass
class DocExamples:
    params: list[ParamsSnippet]
    ros_args: list[RosArgsExample]
    launches: list[LaunchExample]
    errors: list[str]  # blocks the conventions cannot place (shown by a test)


def _commands(text: str) -> list[tuple[int, str]]:
    """(line offset, command) of a shell block: continuation lines joined, prompts dropped."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for i, line in enumerate(text.splitlines()):
        if not pending:
            start = i
            line = re.sub(r"^\s*\$\s+", "", line)
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    if pending:
        out.append((start, pending))
    return out


def _words(command: str) -> list[list[str]]:
    """The simple commands of a shell line (split at ; && || | &), each as the shell splits it.
    Comments are dropped; a line shlex cannot split (an unbalanced quote) gives nothing."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError:
        return []
    commands, current = [], []
    for token in tokens:
        if token and set(token) <= set(";&|"):
            commands.append(current)
            current = []
        else:
            current.append(token)
    commands.append(current)
    return [c for c in commands if c]


def _from_command(where: str, words: list[str], examples: DocExamples) -> None:
    if "--ros-args" in words:
        examples.ros_args.append(RosArgsExample(where, tuple(words[words.index("--ros-args") :])))
    for i in range(len(words) - 2):
        if words[i] == "ros2" and words[i + 1] == "launch":
            rest = [w for w in words[i + 2 :] if not w.startswith("-")]
            if len(rest) >= 2:
                arguments = tuple(tuple(w.split(":=", 1)) for w in rest[2:] if ":=" in w)
                examples.launches.append(LaunchExample(where, rest[0], rest[1], arguments))


def _inline(where: str, span: str, examples: DocExamples) -> None:
    span = span.strip()
    if span.startswith(("--ros-args", "-p ", "--param ")):
        for words in _words(span):
            args = words if words[0] == "--ros-args" else ["--ros-args", *words]
            if len(args) > 1:  # not the bare name of the option
                examples.ros_args.append(RosArgsExample(where, tuple(args)))
        return
    match = INLINE_ASSIGNMENT.match(span)
    if match and match.group(1).strip():
        examples.ros_args.append(RosArgsExample(where, ("--ros-args", "-p", span)))


def collect(root: Path = ROOT) -> DocExamples:
    examples = DocExamples([], [], [], [])
    md = MarkdownIt("commonmark")
    for path in doc_files(root):
        name = str(path.relative_to(root))
        tokens = md.parse(path.read_text())
        previous = None
        for token in tokens:
            line = token.map[0] + 1 if token.map else 0
            where = f"{name}:{line}"
            if token.type == "fence":
                language = (token.info.split() or [""])[0].lower()
                kind, reason = "params", ""
                if previous is not None and previous.type == "html_block":
                    mark = MARK.match(previous.content.strip())
                    if mark:
                        kind, reason = mark.group(1), (mark.group(2) or "").strip()
                        if kind not in KINDS[1:]:
                            examples.errors.append(
                                f"{where}: unknown docs-check mark '{kind}' "
                                f"(known: {', '.join(KINDS[1:])})"
                            )
                is_params = "ros__parameters:" in token.content
                if language in ("yaml", "yml") or is_params:
                    if kind == "params" and not is_params:
                        examples.errors.append(
                            f"{where}: a YAML block without ros__parameters: mark it "
                            f"'<!-- docs-check: fragment (...) -->' or 'not-params (...)'"
                        )
                    examples.params.append(ParamsSnippet(where, token.content, kind, reason))
                elif language in SHELL:
                    for offset, command in _commands(token.content):
                        for words in _words(command):
                            _from_command(f"{name}:{line + 1 + offset}", words, examples)
            elif token.type == "inline":
                for child in token.children or []:
                    if child.type == "code_inline":
                        _inline(where, child.content, examples)
            previous = token
    examples.ros_args = list(dict.fromkeys(examples.ros_args))  # a paragraph's repeats
    return examples


def wrapped(snippet: ParamsSnippet) -> str:
    """The text rcl is given: a fragment without ros__parameters goes under /**."""
    if snippet.kind == "fragment" and "ros__parameters:" not in snippet.text:
        body = "".join(
            f"    {line}" if line.strip() else line
            for line in snippet.text.splitlines(keepends=True)
        )
        return "/**:\n  ros__parameters:\n" + body
    return snippet.text
