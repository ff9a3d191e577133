"""The documents a reader follows stay whole: every relative link of README.md, CONTRIBUTING.md
and docs/ names a file of the repository (and a heading of it, where it names one), and
docs/architecture.md's index of the `Note [...]` blocks lists every note where it is defined."""
import re
import subprocess

from memtrace_testing import ROOT

DOCUMENTS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
# [text](target): not an image's data, not a web address, not inside a code block.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*```")


def prose(path):
    """The lines of a Markdown file outside its code blocks."""
    inside = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            inside = not inside
        elif not inside:
            yield line


def anchors(path):
    """The anchors GitHub gives a file's headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated one suffixed -1, -2, ..."""
    seen = {}
    for line in prose(path):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        yield slug if count == 0 else f"{slug}-{count}"


def test_every_relative_link_names_a_file_and_a_heading_of_it():
    broken = []
    for document in DOCUMENTS:
        for line in prose(document):
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue  # https:, mailto:
                file, _, anchor = target.partition("#")
                resolved = (document.parent / file).resolve() if file else document
                if not resolved.exists():
                    broken.append(f"{document.relative_to(ROOT)}: {target} (no such file)")
                elif anchor and resolved.suffix == ".md" and anchor not in set(anchors(resolved)):
                    broken.append(f"{document.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def defined_notes():
    """{title: file} of every `Note [title]` block: a comment line holding only the title,
    followed by the comment that explains it (a line naming a note above code refers to it)."""
    files = subprocess.run(["git", "ls-files", "*.h", "*.cpp", "*.c", "*.py", "*.js"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    title = re.compile(r"^\s*(?://|#|\*)?\s*Note \[([^\]]+)\]\s*$")
    notes = {}
    for name in files:
        path = ROOT / name
        if not path.exists():
            continue
        lines = path.read_text(errors="replace").splitlines()
        for number, line in enumerate(lines):
            match = title.match(line)
            if not match:
                continue
            following = lines[number + 1].strip() if number + 1 < len(lines) else ""
            if line.strip().startswith(("//", "#")) and not following.startswith(("//", "#")):
                continue
            notes.setdefault(match.group(1), name)
    return notes


def test_the_index_of_notes_lists_each_note_where_it_is_defined():
    text = (ROOT / "docs" / "architecture.md").read_text()
    indexed = dict(re.findall(r"^\| (.+?) \| `([^`]+)` \|$", text, flags=re.MULTILINE))
    defined = defined_notes()
    assert len(defined) > 50, defined  # the detection itself still works
    missing = {title: file for title, file in defined.items() if indexed.get(title) != file}
    gone = {title: file for title, file in indexed.items() if title not in defined}
    assert not missing and not gone, (
        "docs/architecture.md's index of notes is out of date\n"
        f"  to add (or move): {missing}\n  to remove: {gone}")
