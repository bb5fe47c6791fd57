#!/usr/bin/python3
"""Keeps every command the documentation shows in step with the code.

Reads each ```sh block of README.md and docs/*.md and splits it into simple
commands (pipes, &&, ; and line continuations understood). For each:
  - a program of this repository (scripts/..., benchmarks/..., build/bin/...)
    must exist: a file of the tree, or a program the build makes;
  - every --flag it is given (before a `--` that hands the rest to another
    program) must appear in that program's own --help;
  - it must be run by some test, or be listed below in NOT_RUN with the
    reason. Run by a test means: its name is in the COMMAND of an add_test
    of some CMakeLists.txt, in a file such a COMMAND runs (a script, or the
    sources of the test binary it names), in the sources of a ps_add_test, in
    .ci/run, or in a file of tests/ that one of those names, includes or
    imports (run_by_tests below). Elsewhere in a CMakeLists.txt (a library, a
    target, a comment), in a test file nothing runs, or in the two checks
    that only run every program's --help (DOC_CHECKERS) does not count; a
    program on NOT_RUN that a test runs is a problem too;
  - a program of scripts/ or benchmarks/ must have its section in
    docs/reference.md (scripts/gen_reference.py's list);
  - a test binary (built by scripts/test.sh, not by the quickstart) must come
    after a `cmake --build ... --target` naming it in the same block;
  - any other program must be listed in OTHER_PROGRAMS (system tools, cluster
    tools that need a real cluster) or in READER_FILES (files the page has
    the reader write).
And every relative link of those pages names a file of the tree and, with
#anchor into a page, one of its headings. Prints each problem with its page
and line, and exits 1 if there is one. First it checks run_by_tests itself
on a small tree of its own (self_check).

    tests/docs_commands_test.py [--bin-dir build/bin]
"""
import argparse
import glob
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Commands not of this repository, with why they are not run by a test here.
OTHER_PROGRAMS = {
    "cmake": "the build tool (scripts/test.sh runs it)", "ctest": "the test runner (scripts/test.sh runs it)",
    "mkdir": "coreutils", "cp": "coreutils", "chmod": "coreutils", "cat": "coreutils", "ls": "coreutils",
    "kill": "coreutils", "grep": "coreutils", "for": "shell syntax", "do": "shell syntax", "done": "shell syntax",
    "export": "shell syntax", "cd": "shell syntax", "git": "version control",
    "apt-get": "Debian's package manager (scripts/install_deps.sh runs it)",
    "curl": "fetches a metrics page; tests/metrics_prometheus_test.sh scrapes the same endpoints",
    "sbatch": "needs a Slurm cluster; tests/slurm_test.sh runs train.sbatch on a one-node cluster it starts",
    "srun": "needs a Slurm cluster", "squeue": "needs a Slurm cluster", "scancel": "needs a Slurm cluster",
    "kubectl": "needs a Kubernetes cluster; tests/k8s_manifests_test.sh validates the manifests offline",
    "kind": "needs kind and a container runtime", "docker": "needs a container runtime",
    "xargs": "coreutils", "scp": "copies keys to other machines", "ssh": "reaches other machines",
    "prometheus": "Prometheus itself; tests/metrics_prometheus_test.sh runs it",
}
# Files a page has the reader write first (not in the tree), and who runs them.
READER_FILES = {
    "train.py": "README's PyTorch script: tests/readme_commands_test.sh writes it from the ```python block and runs it",
    "build/bin/my_worker": "the C++ program docs/cpp-client.md has the reader build",
}
# Programs of the tree that no test runs, and why.
NOT_RUN = {
    "scripts/k8s/build_rootfs.sh": "builds a container image: needs root, debootstrap and time beyond a test",
}
# Scripts that hand their options to another: a flag is checked against both helps.
DELEGATES = {
    "scripts/quickstart.sh": "scripts/train_fashion_mnist.sh",
    "scripts/train_torch.sh": "scripts/train_fashion_mnist.sh",
    "scripts/train_spam.sh": "scripts/train_fashion_mnist.sh",
    "scripts/train_torch_spam.sh": "scripts/train_fashion_mnist.sh",
}
# Scripts whose arguments go to another program entirely.
PASS_THROUGH = {"scripts/test.sh": "its arguments go to ctest"}
LAUNCHERS = ("sudo", "timeout", "env", "nohup", "exec", "time")
# Tests that run every program's --help only (this one, and the reference's): what they name is not run.
DOC_CHECKERS = ("tests/docs_commands_test.py", "scripts/gen_reference.py")


def cmake_calls(text, command):
    """The arguments (words, quotes dropped) of every COMMAND(...) call of a CMakeLists.txt."""
    text = re.sub(r"#[^\n]*", "", text)
    out = []
    for m in re.finditer(rf"(?<![\w]){command}\s*\(", text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        out.append(re.findall(r'"(?:[^"\\]|\\.)*"|[^\s"]+', text[m.end():i - 1]))
    return out


def run_by_tests(root):
    """The text of what the tests run: every add_test's COMMAND words and
    the files they name (a script, a test binary's sources), every
    ps_add_test's sources, .ci/run and the files it names, and the files of
    tests/ that any of those names, includes or imports, and so on."""
    targets, files, words = {}, set(), []

    def resolve(word, cmake_dir):
        word = word.strip('"').replace("${PROJECT_SOURCE_DIR}", root).replace("${CMAKE_CURRENT_SOURCE_DIR}", cmake_dir)
        path = os.path.normpath(word if os.path.isabs(word) else os.path.join(cmake_dir, word))
        return path if path.startswith(root + os.sep) and os.path.isfile(path) else None  # a file of the tree

    lists = [f for f in glob.glob(os.path.join(root, "**", "CMakeLists.txt"), recursive=True)
             if not os.path.relpath(f, root).startswith("build")]
    commands = []
    for f in lists:
        text, here = open(f).read(), os.path.dirname(f)
        for args in cmake_calls(text, "add_executable"):
            if args:
                targets[args[0]] = [p for p in (resolve(a, here) for a in args[1:]) if p]
        for args in cmake_calls(text, "ps_add_test"):
            if args:
                words.append(args[0])
                srcs = args[1:next((i for i, a in enumerate(args) if a in ("LIBS", "DEPENDS")), len(args))]
                files.update(p for p in (resolve(a, here) for a in srcs) if p)
        for args in cmake_calls(text, "add_test"):
            if "COMMAND" in args:
                commands.append((args[args.index("COMMAND") + 1:], here))
    for args, here in commands:
        words += args
        if args:  # a test binary of the tree: its sources (a program it is handed is named among the words)
            files.update(targets.get(re.sub(r"^\$<TARGET_FILE:(\w+)>$", r"\1", args[0]), []))
        files.update(p for p in (resolve(a, here) for a in args) if p)
    ci = os.path.join(root, ".ci", "run")
    if os.path.isfile(ci):
        files.add(ci)
    files -= {os.path.join(root, f) for f in DOC_CHECKERS}
    candidates = [f for f in glob.glob(os.path.join(root, "tests", "**", "*"), recursive=True)
                  if os.path.isfile(f) and os.path.basename(f) != "CMakeLists.txt" and
                  os.path.relpath(f, root) not in DOC_CHECKERS]
    by_name, by_module = {}, {}
    for c in candidates:
        by_name.setdefault(os.path.basename(c), []).append(c)
        if c.endswith(".py"):
            by_module.setdefault(os.path.basename(c)[:-3], []).append(c)
    seen, text = set(), [" ".join(words)]
    while files - seen:
        for f in sorted(files - seen):
            seen.add(f)
            body = open(f, errors="replace").read()
            text.append(body)
            for word in re.findall(r"(?<![\w.-])[\w.-]+", body):
                files.update(by_name.get(word.rstrip("."), []))
            for module in re.findall(r"\b(?:from|import)\s+(\w+)", body):
                files.update(by_module.get(module, []))
    return "\n".join(text)


def names_in(name, text):
    """Whether a program's name appears in TEXT as a word of its own (not as part of another name)."""
    return re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", text) is not None


def self_check():
    """run_by_tests on a tree of its own: what counts as run, and what does not. The problems found."""
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        tree = {
            "CMakeLists.txt": "# scripts/in_a_comment.sh\nadd_library(ps_lib ps_in_a_library.cc)\n"
                              "add_executable(ps_target main.cc)\n"
                              "add_test(NAME a COMMAND ${PROJECT_SOURCE_DIR}/tests/a_test.sh ps_on_the_line)\n"
                              "add_executable(b_test tests/b_test.cc)\nadd_test(NAME b COMMAND b_test)\n"
                              "ps_add_test(c_test tests/c_test.cc LIBS ps_lib)\n"
                              "add_executable(ps_prog prog.cc)\n"
                              "add_test(NAME e COMMAND ${PROJECT_SOURCE_DIR}/tests/e_test.sh $<TARGET_FILE:ps_prog>)\n"
                              "add_test(NAME f COMMAND ${PROJECT_SOURCE_DIR}/tests/docs_commands_test.py)\n",
            "tests/a_test.sh": "source tests/lib.sh\nscripts/run_by_a.sh --x\n# tests/CMakeLists.txt\n",
            "tests/CMakeLists.txt": "# scripts/in_tests_cmake.sh\n",
            "tests/e_test.sh": "\"$1\" --x\n",
            "prog.cc": "// scripts/in_a_program_source.sh\n",
            "tests/docs_commands_test.py": "scripts/in_the_checker.sh\n",
            "tests/lib.sh": "scripts/run_by_lib.sh\n",
            "tests/b_test.cc": "Start(\"ps_run_by_b\");\n",
            "tests/c_test.cc": "Start(\"ps_run_by_c\");\n",
            "tests/unregistered_test.sh": "scripts/not_run.sh\n",
            "main.cc": "", "ps_in_a_library.cc": "",
        }
        for path, body in tree.items():
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            open(os.path.join(root, path), "w").write(body)
        text = run_by_tests(root)
    problems = []
    for name in ("run_by_a.sh", "run_by_lib.sh", "ps_on_the_line", "ps_run_by_b", "ps_run_by_c", "ps_prog"):
        if not names_in(name, text):
            problems.append(f"self-check: {name} is run by a test but not counted")
    for name in ("in_a_comment.sh", "ps_in_a_library", "ps_target", "not_run.sh", "run_by", "in_tests_cmake.sh",
                 "in_a_program_source.sh", "in_the_checker.sh"):
        if names_in(name, text):
            problems.append(f"self-check: {name} is run by no test but counted")
    return problems


def sh_blocks(path):
    """(first line number, text) of each ```sh block of a Markdown file."""
    lines = open(path).read().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = re.match(r"^\s*```(\w*)\s*$", lines[i])
        if m:
            j = i + 1
            while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
                j += 1
            if m.group(1) in ("sh", "bash", "shell"):
                blocks.append((i + 2, "\n".join(lines[i + 1:j])))
            i = j
        i += 1
    return blocks


def simple_commands(text):
    """(line offset, tokens) of every simple command of a block."""
    out = []
    joined = re.sub(r"\\\n", " ", text)
    for n, line in enumerate(joined.split("\n")):
        lex = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lex.whitespace_split = True
        lex.commenters = "#"
        try:
            tokens = list(lex)
        except ValueError as e:
            out.append((n, ["<unparsable>", str(e)]))
            continue
        current = []
        for t in tokens + [";"]:
            if t and set(t) <= set(";&|"):
                if current:
                    out.append((n, current))
                current = []
            else:
                current.append(t)
    return out


def program_of(tokens):
    """The program a simple command runs and its arguments (launchers,
    environment settings and an interpreter in front dropped)."""
    t = list(tokens)
    while t and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", t[0]) or t[0] in LAUNCHERS or
                 (t[0].isdigit() and len(t) > 1)):
        t = t[1:]
    if t and os.path.basename(t[0]).startswith("python3") and len(t) > 1 and not t[1].startswith("-"):
        t = t[1:]
    return (t[0], t[1:]) if t else (None, [])


class Checker:
    def __init__(self, bin_dir):
        self.bin_dir = bin_dir
        self.helps = {}
        self.tested = run_by_tests(ROOT)
        self.reference = open(os.path.join(ROOT, "docs", "reference.md")).read()
        self.test_targets = self.test_binaries()
        self.problems = []

    @staticmethod
    def test_binaries():
        names = set()
        for f in glob.glob(os.path.join(ROOT, "**", "CMakeLists.txt"), recursive=True):
            if "/build/" in f:
                continue
            names.update(re.findall(r"ps_add_test\((\w+)", open(f).read()))
        return names | {"soak_test", "replica_soak_test"}

    def help_of(self, path):
        if path not in self.helps:
            cmd = ["/usr/bin/python3", path] if path.endswith(".py") else [path]
            try:
                r = subprocess.run(cmd + ["--help"], cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True,
                                   text=True, timeout=60)
                self.helps[path] = r.stdout + r.stderr
            except (OSError, subprocess.TimeoutExpired) as e:
                self.helps[path] = ""
                self.say(path, 0, f"{path} --help could not run: {e}")
        return self.helps[path]

    def help_of_sub(self, path, sub):
        cmd = ["/usr/bin/python3", path] if path.endswith(".py") else [path]
        r = subprocess.run(cmd + [sub, "--help"], cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=60)
        return r.stdout + r.stderr

    def say(self, where, line, problem):
        self.problems.append(f"{where}:{line}: {problem}")

    def check(self, page, line, tokens, block):
        prog, args = program_of(tokens)
        if prog is None or prog == "<unparsable>":
            if prog:
                self.say(page, line, f"cannot parse: {args[0]}")
            return
        rel = os.path.normpath(prog).lstrip("./") if not prog.startswith("/") else prog
        if prog.startswith("./"):
            rel = os.path.normpath(prog)
        if rel in READER_FILES or os.path.basename(prog) in OTHER_PROGRAMS or prog.startswith("/"):
            return
        if rel.startswith("build/bin/"):
            name = rel[len("build/bin/"):]
            path = os.path.join(self.bin_dir, name)
            if name in self.test_targets and not re.search(rf"--target\b[^\n]*\b({name}|ps_tests)\b", block):
                self.say(page, line, f"{rel} is a test binary, not built by the quickstart: put "
                                     f"`cmake --build build --target {name}` before it in the block")
        else:
            name = rel
            path = os.path.join(ROOT, rel)
        if not os.path.isfile(path):
            self.say(page, line, f"{prog}: no such program in the tree or the build (list it in docs_commands_test.py "
                                 f"if the page has the reader make it)")
            return
        self.check_flags(page, line, rel, path, args)
        base = os.path.basename(name)
        if not names_in(base, self.tested) and rel not in NOT_RUN:
            self.say(page, line, f"{rel}: no test runs it (add one, or list it in NOT_RUN with the reason)")
        if names_in(base, self.tested) and rel in NOT_RUN:
            self.say(page, line, f"{rel}: a test runs it: take it off NOT_RUN")
        if rel.startswith(("scripts/", "benchmarks/")) and f"\n### {rel}\n" not in self.reference:
            self.say(page, line, f"{rel}: no section in docs/reference.md (add it to scripts/gen_reference.py's "
                                 f"SCRIPTS and run it)")

    def check_flags(self, page, line, rel, path, args):
        if rel in PASS_THROUGH:
            return
        flags, skip = [], False
        for a in args:
            if a == "--":
                break
            m = re.match(r"^(--[A-Za-z0-9][A-Za-z0-9_-]*)", a)
            if m and not skip:
                flags.append(m.group(1))
            # --scheduler-flag --x=1: the value is another program's flag.
            skip = bool(m) and m.group(1).endswith("-flag") and "=" not in a
        if not flags:
            return
        text = self.help_of(path)
        if rel in DELEGATES:
            text += self.help_of(os.path.join(ROOT, DELEGATES[rel]))
        if args and re.match(r"^[a-z][a-z_-]*$", args[0]):  # a subcommand (netns.py run ...): its own --help
            text += self.help_of_sub(path, args[0])
        for f in flags:
            if f in ("--help", "-h"):
                continue
            if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", text):
                self.say(page, line, f"{rel} {f}: not a flag its --help lists")


def anchors(path):
    """The anchors GitHub makes of a Markdown page's headings."""
    out = set()
    for line in open(path).read().split("\n"):
        m = re.match(r"^#{1,6}\s+(.*?)\s*$", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).lower().replace("`", ""))
            out.add(text.replace(" ", "-"))
    return out


def check_links(checker, page):
    rel_page = os.path.relpath(page, ROOT)
    text = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), open(page).read(), flags=re.S)
    for n, line in enumerate(text.split("\n"), 1):
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"):
                continue
            file, _, anchor = target.partition("#")
            path = os.path.normpath(os.path.join(os.path.dirname(page), file)) if file else page
            if not os.path.exists(path):
                checker.say(rel_page, n, f"link to {target}: no such file")
            elif anchor and path.endswith(".md") and anchor not in anchors(path):
                checker.say(rel_page, n, f"link to {target}: no heading makes #{anchor}")


def main(argv):
    p = argparse.ArgumentParser(description="Checks every ```sh command of README.md and docs/.")
    p.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    a = p.parse_args(argv)
    checker = Checker(os.path.abspath(a.bin_dir))
    checker.problems += self_check()
    pages = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    commands = 0
    for page in pages:
        rel_page = os.path.relpath(page, ROOT)
        for first, block in sh_blocks(page):
            for n, tokens in simple_commands(block):
                commands += 1
                checker.check(rel_page, first + n, tokens, block)
        check_links(checker, page)
    for problem in checker.problems:
        print(f"FAIL: {problem}")
    print(f"docs_commands: {commands} commands in {len(pages)} pages, {len(checker.problems)} problems")
    return 1 if checker.problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
