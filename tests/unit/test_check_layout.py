#!/usr/bin/env python3
"""check_layout.py on small fake trees: each rule of docs/design.md §1 it enforces catches a
violation (naming file:line), allowed includes pass, call cycles between files are found
without false edges, and the allowlists work both ways."""
import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layout  # noqa: E402

CLEAN_TREE = {
    "base/status.h": "#include <stdarg.h>\n",
    "base/log.h": '#include "base/status.h"\n',
    "bus/bus.h": '#include "base/status.h"\n',
    "bus/bus.c": '#include "bus/bus.h"\n#include <nats/nats.h>\n',
    "schemas/codec.h": '#include "base/status.h"\n',
    "schemas/codec.cc": '#include "schemas/codec.h"\n#include <flatbuffers/flatbuffers.h>\n'
                        '#include "common_generated.h"\n',
    "kernels/backend.h": '#include "base/status.h"\n',
    "kernels/cpu/ops.c": '#include "kernels/backend.h"\n#include "ops_internal.h"\n',
    "kernels/cpu/ops_internal.h": '#include <stdint.h>\n',
    "kernels/cuda/matmul.cu": '#include "kernels/backend.h"\n#include <cuda_runtime.h>\n#include <cublas_v2.h>\n',
    "model/forward.c": '#include "kernels/backend.h"\n#include "base/log.h"\n',
    "model/forward.h": '#include "kernels/backend.h"\n',
    "actors/scheduler/scheduler.c": '#include "actors/scheduler/scheduler.h"\n#include "bus/bus.h"\n'
                                    '#include "schemas/codec.h"\n#include "model/forward.h"\n',
    "actors/scheduler/scheduler.h": '#include "base/status.h"\n',
    "actors/gpu_worker/runner.c": '#include "kernels/backend.h"\n#include "model/forward.h"\n',
    "cmd/main.c": '#include "actors/scheduler/scheduler.h"\n#include "bus/bus.h"\n'
                  '#include "cmd/client/client.h"\n#include "cmd/supervisor/supervisor.h"\n'
                  'int main(int argc, char **argv) { return 0; }\n',
    "cmd/supervisor/supervisor.h": '#include "base/status.h"\n',
    "cmd/client/client.h": '#include "bus/bus.h"\n',
    "cmd/client/run.c": '#include "cmd/client/client.h"\n#include "cmd/supervisor/supervisor.h"\n',
    "tests/unit/test_x.c": '#include "actors/scheduler/scheduler.h"\n#include "tests/unit/h.h"\n',
    "tests/unit/h.h": '#include "kernels/backend.h"\n',
    # The build: every CMake file names only sources of its own folder (and of subfolders without
    # a CMakeLists.txt), in each way the checkout writes them.
    "CMakeLists.txt": "# llb_add_test(NAME SOURCES a.c)\nadd_subdirectory(model)\nadd_subdirectory(tests)\n",
    "model/CMakeLists.txt": "add_library(m STATIC forward.c ${CMAKE_CURRENT_SOURCE_DIR}/forward.c)\n"
                            "include(jinja/jinja.cmake)\n",
    "model/jinja/jinja.cmake": "add_library(j STATIC ${CMAKE_CURRENT_LIST_DIR}/jinja.c jinja/eval.c)\n",
    "tests/CMakeLists.txt": "include(unit/x.cmake)\n",
    "tests/unit/x.cmake": "set(srcs ${CMAKE_CURRENT_LIST_DIR}/../fuzz/f.c)\n"
                          "get_filename_component(r ${CMAKE_CURRENT_LIST_DIR}/../.. ABSOLUTE)\n"
                          "add_executable(t ${CMAKE_CURRENT_LIST_DIR}/${t}.c ${r}/tests/tools/b.c unit/test_x.c)\n",
}


class Tree:
    """A fake checkout in a temporary folder; `extra` adds or replaces files."""

    def __init__(self, extra=None, allowlist=(), call_allowlist=(), cmake_exempt=None):
        self.files = dict(CLEAN_TREE)
        self.files.update(extra or {})
        self.allowlist = list(allowlist)
        self.call_allowlist = list(call_allowlist)
        self.cmake_exempt = dict(cmake_exempt or {})

    def __enter__(self):
        self.tmp = tempfile.TemporaryDirectory()
        for path, text in self.files.items():
            full = os.path.join(self.tmp.name, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as fh:
                fh.write(text)
        self.saved = check_layout.ALLOWLIST, check_layout.CALL_CYCLE_ALLOWLIST, check_layout.CMAKE_EXEMPT
        check_layout.ALLOWLIST = self.allowlist
        check_layout.CALL_CYCLE_ALLOWLIST = self.call_allowlist
        check_layout.CMAKE_EXEMPT = self.cmake_exempt
        return self

    def __exit__(self, *exc):
        check_layout.ALLOWLIST, check_layout.CALL_CYCLE_ALLOWLIST, check_layout.CMAKE_EXEMPT = self.saved
        self.tmp.cleanup()

    def problems(self):
        return [f"{f}:{line}: {msg}" for f, line, msg in check_layout.check(self.tmp.name)]

    def main(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = check_layout.main(["check_layout.py", self.tmp.name])
        return rc, out.getvalue()


class CheckLayoutTest(unittest.TestCase):
    def assert_one_problem(self, extra, where, words):
        with Tree(extra) as t:
            problems = t.problems()
        self.assertEqual(len(problems), 1, problems)
        self.assertTrue(problems[0].startswith(where + ": "), problems)
        for w in words:
            self.assertIn(w, problems[0])

    def test_clean_tree_passes(self):
        with Tree() as t:
            self.assertEqual(t.problems(), [])
            rc, out = t.main()
        self.assertEqual(rc, 0, out)

    def test_kernels_including_model_is_caught_with_file_and_line(self):
        self.assert_one_problem({"kernels/cpu/ops.c": '#include "kernels/backend.h"\n\n#include "model/forward.h"\n'},
                                "kernels/cpu/ops.c:3", ["model/forward.h", "kernels/ may not include model/"])

    def test_exit_code_is_one_and_output_names_file_line(self):
        with Tree({"bus/bus.c": '#include "bus/bus.h"\n#include "schemas/codec.h"\n'}) as t:
            rc, out = t.main()
        self.assertEqual(rc, 1)
        self.assertIn("bus/bus.c:2: includes schemas/codec.h", out)

    def test_bus_schemas_model_kernels_know_none_of_each_other(self):
        for src, dst in [("bus/x.c", "model/forward.h"), ("schemas/x.c", "bus/bus.h"),
                         ("model/x.c", "schemas/codec.h"), ("kernels/x.c", "bus/bus.h"),
                         ("base/x.c", "bus/bus.h")]:
            with self.subTest(src=src, dst=dst):
                self.assert_one_problem({src: f'#include "{dst}"\n'}, f"{src}:1", [dst])

    def test_library_folders_never_include_actors_cmd_or_tests(self):
        for src, dst in [("model/x.c", "actors/scheduler/scheduler.h"), ("bus/x.c", "tests/unit/h.h"),
                         ("actors/scheduler/x.c", "cmd/main.c"), ("kernels/cuda/x.cu", "tests/unit/h.h")]:
            with self.subTest(src=src, dst=dst):
                self.assert_one_problem({src: f'#include "{dst}"\n'}, f"{src}:1", [dst])

    def test_an_actor_including_another_actor_is_caught(self):
        self.assert_one_problem({"actors/kv_manager/x.c": '#include "actors/scheduler/scheduler.h"\n'},
                                "actors/kv_manager/x.c:1", ["another actor"])

    def test_only_the_worker_actor_may_include_kernels(self):
        self.assert_one_problem({"actors/scheduler/x.c": '#include "kernels/backend.h"\n'},
                                "actors/scheduler/x.c:1", ["kernels/backend.h"])

    def test_unresolved_include_is_judged_by_the_path_written(self):
        self.assert_one_problem({"kernels/x.c": '#include "model/not_there.h"\n'},
                                "kernels/x.c:1", ["model/not_there.h"])

    def test_nats_flatbuffers_and_cuda_headers_stay_in_their_folder(self):
        for src, text, words in [("model/x.c", "<nats/nats.h>", "only bus/"),
                                 ("tests/unit/x.c", "<nats.h>", "only bus/"),
                                 ("actors/scheduler/x.c", "<flatbuffers/flatbuffers.h>", "only schemas/"),
                                 ("bus/x.c", '"kv_step_generated.h"', "only schemas/"),
                                 ("kernels/cpu/x.c", "<cuda_runtime.h>", "only kernels/cuda/"),
                                 ("model/x.c", "<cublas_v2.h>", "only kernels/cuda/")]:
            with self.subTest(src=src, text=text):
                self.assert_one_problem({src: f"#include {text}\n"}, f"{src}:1", [words])

    def test_cmd_subfolders_include_only_what_cmd_allowed_says(self):
        for src, dst in [("cmd/supervisor/x.c", "cmd/client/client.h"),
                         ("cmd/bench/x.c", "cmd/supervisor/supervisor.h"),
                         ("cmd/new/x.c", "cmd/client/client.h"),
                         ("cmd/client/x.c", "cmd/main.c")]:
            with self.subTest(src=src, dst=dst):
                self.assert_one_problem({src: f'#include "{dst}"\n'}, f"{src}:1", [dst, "cmd/README.md"])

    def test_model_subfolders_include_only_what_model_allowed_says(self):
        for src, dst in [("model/gguf/x.c", "model/tokenizer/tokenizer.h"),
                         ("model/structured/x.c", "model/forward/forward.h"),
                         ("model/new/x.c", "model/gguf/gguf.h"),
                         ("model/tokenizer/x.c", "model/forward.h")]:
            with self.subTest(src=src, dst=dst):
                self.assert_one_problem({src: f'#include "{dst}"\n'}, f"{src}:1", [dst, "model/README.md"])
        with Tree({"model/structured/x.c": '#include "model/tokenizer/tokenizer.h"\n#include "model/structured/y.h"\n',
                   "model/tokenizer/x.c": '#include "model/gguf/gguf.h"\n',
                   "model/x.c": '#include "model/vision/clip.h"\n',
                   "actors/scheduler/x.c": '#include "model/structured/so.h"\n'}) as t:
            self.assertEqual(t.problems(), [])

    def test_a_model_folders_internal_header_stays_in_it(self):
        for src, dst in [("actors/scheduler/x.c", "model/vision/clip_internal.h"),
                         ("model/forward/x.c", "model/gguf/gguf_internal.h")]:
            with self.subTest(src=src, dst=dst):
                self.assert_one_problem({src: f'#include "{dst}"\n'}, f"{src}:1", [dst, "private"])
        with Tree({"tests/unit/x.c": '#include "model/structured/so_internal.h"\n',
                   "model/structured/x.c": '#include "model/structured/so_internal.h"\n'}) as t:
            self.assertEqual(t.problems(), [])

    def test_in_process_tools_include_no_actor_header_but_those_named(self):
        for src, dst in [("cmd/client/x.c", "actors/gpu_worker/sampler.h"),
                         ("cmd/bench/x.c", "actors/scheduler/scheduler.h")]:
            with self.subTest(src=src, dst=dst):
                self.assert_one_problem({src: f'#include "{dst}"\n'}, f"{src}:1", [dst, "CMD_ACTOR_HEADERS"])
        with Tree({"cmd/bench/x.c": '#include "actors/gpu_worker/runner_sim.h"\n',
                   "cmd/supervisor/x.c": '#include "actors/scheduler/scheduler.h"\n'}) as t:
            self.assertEqual(t.problems(), [])

    def test_cmd_itself_holds_only_mains(self):
        for path, text in [("cmd/commands.h", "int cmd_x(void);\n"),
                           ("cmd/serve.c", "int cmd_serve(int argc, char **argv) { return 0; }\n")]:
            with self.subTest(path=path):
                self.assert_one_problem({path: text}, f"{path}:1", ["only mains"])

    def test_include_cycle_is_caught_once(self):
        extra = {"model/a.h": '#include "model/b.h"\n', "model/b.h": '#include "model/c.h"\n',
                 "model/c.h": '#include "base/log.h"\n#include "model/a.h"\n'}
        with Tree(extra) as t:
            problems = t.problems()
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("include cycle", problems[0])
        for f in ("model/a.h", "model/b.h", "model/c.h:2"):
            self.assertIn(f, problems[0])

    def test_source_file_outside_the_layout_is_caught(self):
        self.assert_one_problem({"util/x.c": "int x;\n"}, "util/x.c:1", ["outside"])

    def test_build_trees_are_not_read(self):
        with Tree({"build/kernels/x.c": '#include "model/forward.h"\n',
                   "build-release/kernels/x.c": '#include "model/forward.h"\n',
                   "other/CMakeCache.txt": "", "other/x.c": "int x;\n",
                   ".venv/x.c": "int x;\n"}) as t:
            self.assertEqual(t.problems(), [])

    def test_a_build_named_folder_inside_the_tree_is_still_read(self):
        self.assert_one_problem({"kernels/builders/x.c": '#include "model/forward.h"\n'},
                                "kernels/builders/x.c:1", ["model/forward.h"])

    def test_a_subject_formatted_by_hand_outside_bus_is_caught(self):
        for fmt, args in [('"%s.engine.*.stats"', "prefix"), ('"%s.tokenize.%s"', "p, t"),
                          ('"%s.health.%s.*"', "p, peer"), ('"%s.*"', "ch->inbox"),
                          ('"%s.%s.%s"', "bus_prefix(bus), kind, tenant"),
                          ('"%s.%" PRIu64', "ch->inbox, step"), ('"llm.generate.%s"', "t")]:
            with self.subTest(fmt=fmt):
                src = f"void f(char *b, int n) {{\n  snprintf(b, n,\n           {fmt}, {args});\n}}\n"
                self.assert_one_problem({"actors/scheduler/x.c": src}, "actors/scheduler/x.c:2",
                                        ["formats the NATS subject", fmt, "bus/subject.h"])

    def test_json_paths_file_names_and_bus_itself_are_not_subjects(self):
        src = ('void f(char *b, int n) { snprintf(b, n, "%s.content", name); snprintf(b, n, "%s.%s", arch, key);\n'
               ' snprintf(b, n, "%s.%.60s", p, key); snprintf(b, n, "%s/%s.json", dir, name);\n'
               ' snprintf(b, n, "%s.tmp.%ld", path, pid); snprintf(b, n, "%s", prefix); }\n')
        with Tree({"actors/api_server/x.c": src,
                   "bus/subject.c": 'int g(char *b) { return snprintf(b, 9, "%s.engine.%s.%s", p, e, k); }\n'}) as t:
            self.assertEqual(t.problems(), [])

    def test_allowlist_exempts_its_entry_and_nothing_else(self):
        extra = {"kernels/cuda/fwd.h": '#include "model/forward.h"\n',
                 "kernels/cuda/other.h": '#include "model/forward.h"\n'}
        with Tree(extra, allowlist=[("kernels/cuda/fwd.h", "model/", "known")]) as t:
            problems = t.problems()
        self.assertEqual(len(problems), 1, problems)
        self.assertTrue(problems[0].startswith("kernels/cuda/other.h:1: "), problems)

    def test_fnv_constants_outside_base_are_caught(self):
        for const in ("0x100000001b3ULL", "1099511628211ull", "0xCBF29CE484222325", "14695981039346656037u",
                      "16777619u", "2166136261", "0x811c9dc5", "0x01000193"):
            self.assert_one_problem({"model/x.c": f"#include <stdint.h>\nuint64_t h = {const};\n"},
                                    "model/x.c:2", ["FNV constant", "base/hash.h"])

    def test_fnv_constants_in_base_and_longer_numbers_pass(self):
        extra = {"base/hash.h": "#define P UINT64_C(0x100000001b3)\n",
                 "model/x.c": "int a = 216613626; long b = 21099511628211; int c = 0x100000001b35;\n"}
        with Tree(extra) as t:
            self.assertEqual(t.problems(), [])

    def test_stale_allowlist_entry_fails(self):
        with Tree(allowlist=[("kernels/cuda/gone.h", "model/", "fixed since")]) as t:
            problems = t.problems()
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("stale allowlist entry", problems[0])


    # model/a.c and model/b.c call each other: the smallest call cycle.
    CALL_PAIR = {
        "model/a.h": "int a_get(int x);\nint a_twice(int x);\n",
        "model/b.h": "int b_get(int x);\n",
        "model/a.c": '#include "model/a.h"\n#include "model/b.h"\n'
                     "int a_get(int x) { return x; }\n"
                     "int a_twice(int x) {\n  return 2 * b_get(x);\n}\n",
        "model/b.c": '#include "model/b.h"\n#include "model/a.h"\n'
                     "int b_get(int x) {\n  return a_get(x) + 1;\n}\n",
    }

    def test_two_files_that_call_each_other_are_caught_with_a_symbol_per_edge(self):
        with Tree(self.CALL_PAIR) as t:
            problems = t.problems()
        self.assertEqual(len(problems), 1, problems)
        self.assertTrue(problems[0].startswith("model/a.c:5: call cycle between 2 files"), problems)
        self.assertIn("model/a.c -> model/b.c (b_get, line 5)", problems[0])
        self.assertIn("model/b.c -> model/a.c (a_get, line 4)", problems[0])

    def test_a_three_file_cycle_is_one_problem_naming_every_file(self):
        extra = {"model/a.c": "int a_f(void) { return b_f(); }\n",
                 "model/b.c": "int b_f(void) { return c_f(); }\n",
                 "kernels/c.c": "int c_f(void) { return a_f(); }\nint c_g(void) { return 0; }\n",
                 "model/d.c": "int d_f(void) { return c_g() + a_f(); }\n"}
        with Tree(extra) as t:
            problems = t.problems()
        self.assertEqual(len(problems), 1, problems)
        for edge in ("model/a.c -> model/b.c (b_f", "model/b.c -> kernels/c.c (c_f",
                     "kernels/c.c -> model/a.c (a_f"):
            self.assertIn(edge, problems[0])
        self.assertNotIn("model/d.c", problems[0])

    def test_a_one_way_dependency_is_no_cycle(self):
        extra = dict(self.CALL_PAIR)
        extra["model/b.c"] = "int b_get(int x) { return x + 1; }\n"
        with Tree(extra) as t:
            self.assertEqual(t.problems(), [])

    def test_comments_strings_members_locals_and_statics_are_no_calls(self):
        extra = {"model/a.c": "int a_f(void) { return b_f(); }\n",
                 "model/b.c": "/* a_f() */ // a_f();\n"
                              "struct s { int (*a_f)(void); };\n"
                              "static int a_g(void) { return 0; }\n"
                              "int b_f(void) {\n"
                              "  const char *t = \"a_f(a_g)\"; char c = 'a';\n"
                              "  int a_g2 = 0; struct s v; int a_f = 3;\n"
                              "  return a_g() + a_f + v.a_f() + (&v)->a_f() + a_g2 + t[0] + c;\n"
                              "}\n",
                 "model/c.c": "static int a_f(void) { return 1; }\n"
                              "int c_f(void) { return a_f(); }\n",
                 "model/e.c": "int a_g(void) { return 0; }\n"}
        with Tree(extra) as t:
            self.assertEqual(t.problems(), [])

    def test_a_function_pointer_and_a_macro_are_uses(self):
        for b_text in ["static int (*const hook)(void) = a_f;\nint b_f(void) { return hook(); }\n",
                       "static const struct ops o = { .run = a_f };\nint b_f(void) { return 0; }\n",
                       "int b_f(void) { return reg(a_f); }\n",
                       '#include "model/m.h"\nint b_f(void) { return CALL_A(); }\n']:
            with self.subTest(b=b_text):
                extra = {"model/a.c": "int a_f(void) { return b_f(); }\n", "model/b.c": b_text,
                         "model/m.h": "#define CALL_A() \\\n  (a_f() + 0)\n"}
                with Tree(extra) as t:
                    problems = t.problems()
                self.assertEqual(len(problems), 1, problems)
                self.assertIn("model/b.c -> model/a.c (a_f", problems[0])

    def test_tests_may_call_back_and_forth(self):
        extra = {"tests/unit/a.c": "int ta(void) { return tb(); }\n",
                 "tests/unit/b.c": "int tb(void) { return ta(); }\n"}
        with Tree(extra) as t:
            self.assertEqual(t.problems(), [])

    def test_call_cycle_allowlist_exempts_exactly_its_files_and_goes_stale(self):
        with Tree(self.CALL_PAIR, call_allowlist=[(("model/b.c", "model/a.c"), "known")]) as t:
            self.assertEqual(t.problems(), [])
        with Tree(call_allowlist=[(("model/b.c", "model/a.c"), "known")]) as t:
            problems = t.problems()
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("stale call-cycle allowlist entry", problems[0])

    def test_a_cmakelists_compiling_another_folders_source_is_caught(self):
        # main's actors/kv_manager/CMakeLists.txt built the contract that schemas/ owns
        schemas = {"schemas/CMakeLists.txt": "add_library(s STATIC codec.cc)\n"}
        for words in ("${CMAKE_SOURCE_DIR}/schemas/kv_ops.c", "../../schemas/kv_ops.c",
                      "${PROJECT_SOURCE_DIR}/schemas/kv_ops.c", "${CMAKE_CURRENT_SOURCE_DIR}/../../schemas/kv_ops.c"):
            self.assert_one_problem(
                dict(schemas, **{"actors/kv_manager/CMakeLists.txt": f"add_library(a STATIC a.c)\n"
                                                                     f"add_library(k STATIC {words})\n"}),
                "actors/kv_manager/CMakeLists.txt:2", ["schemas/kv_ops.c", "schemas/CMakeLists.txt owns"])

    def test_a_subfolder_with_its_own_cmakelists_the_root_and_outside_paths_are_caught(self):
        self.assert_one_problem({"model/CMakeLists.txt": "add_library(m STATIC forward.c gguf/read.c)\n",
                                 "model/gguf/CMakeLists.txt": "add_library(g STATIC read.c)\n"},
                                "model/CMakeLists.txt:1", ["model/gguf/read.c", "model/gguf/CMakeLists.txt owns"])
        self.assert_one_problem({"CMakeLists.txt": "add_subdirectory(model)\nadd_library(x STATIC model/forward.c)\n"},
                                "CMakeLists.txt:2", ["model/forward.c", "root CMakeLists.txt only adds folders"])
        self.assert_one_problem({"tests/unit/x.cmake": "add_executable(t ${CMAKE_SOURCE_DIR}/../other/x.c)\n"},
                                "tests/unit/x.cmake:1", ["outside the checkout"])
        self.assert_one_problem({"tests/unit/x.cmake": "get_filename_component(up ${CMAKE_SOURCE_DIR}/.. ABSOLUTE)\n"
                                                       "add_executable(t ${up}/other/x.c)\n"},
                                "tests/unit/x.cmake:2", ["outside the checkout"])

    def test_cmake_exemption_covers_its_file_only_and_goes_stale(self):
        standalone = {"kernels/cuda/standalone/CMakeLists.txt": "add_library(b STATIC ${UNKNOWN}/x.c)\n"
                      "get_filename_component(R ${CMAKE_CURRENT_SOURCE_DIR}/../../.. ABSOLUTE)\n"
                      "add_library(m STATIC ${R}/model/forward.c)\n"}
        with Tree(standalone, cmake_exempt={"kernels/cuda/standalone/CMakeLists.txt": "separate project"}) as t:
            self.assertEqual(t.problems(), [])
        with Tree(standalone) as t:
            problems = t.problems()
        self.assertEqual(len(problems), 1, problems)
        self.assertTrue(problems[0].startswith("kernels/cuda/standalone/CMakeLists.txt:3: "), problems)
        with Tree(cmake_exempt={"kernels/cuda/standalone/CMakeLists.txt": "separate project"}) as t:
            problems = t.problems()
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("stale CMAKE_EXEMPT entry", problems[0])


    def test_an_actor_header_without_the_common_lifecycle_is_caught(self):
        full = ("struct kv_manager_actor_options { int x; };\nstruct kv_manager_actor_stats { int y; };\n"
                "int kv_manager_actor_create (const struct kv_manager_actor_options *o);\n"
                "int kv_manager_actor_start(void);\nvoid kv_manager_actor_stop(void);\n"
                "void kv_manager_actor_destroy(void);\n"
                "void kv_manager_actor_stats(struct kv_manager_actor_stats *out);\n")
        with Tree({"actors/kv_manager/actor.h": full}) as t:
            self.assertEqual(t.problems(), [])
        old_names = full.replace("kv_manager_actor_stop(void);\n", "/* kv_manager_actor_stop( */\n").replace(
            "void kv_manager_actor_stats(", "void kv_manager_actor_get_counters(")
        self.assert_one_problem({"actors/kv_manager/actor.h": old_names}, "actors/kv_manager/actor.h:1",
                                ["kv_manager_actor_stop(", "kv_manager_actor_stats(", "actors/README.md"])
        self.assert_one_problem({"actors/kv_manager/actor.h": full.replace("kv_manager_actor", "kvm_actor")},
                                "actors/kv_manager/actor.h:1", ["struct kv_manager_actor_options"])

    def test_an_actor_header_declaring_a_short_form_of_a_folder_name_is_caught(self):
        clean = ("#ifndef API_SERVER_X_H\n#define API_SERVER_X_H\n#define API_SERVER_MAX 3\n"
                 "/* api_old_name() in a comment */\nstruct api_server_opts {\n"
                 "  const struct api_keys *api_keys; /* a member: not a declaration for includers */\n"
                 "  int api_count;\n};\nstruct api_gone;\n"
                 "int api_server_x(const struct api_gone *api_param, const char *s);\n"
                 "static inline int api_server_y(void) { int api_local = 0; return api_local; }\n"
                 "enum api_server_kind { API_SERVER_KIND_A, API_SERVER_KIND_B = 2 };\n"
                 "typedef void (*api_server_fn)(int api_arg);\n#endif\n")
        tree = {"actors/api_server/x.h": clean,
                "actors/api_server/x.c": 'static int api_private(void) { return 0; }\n',
                "actors/kv_manager/kv_block_pool.h": "struct kv_block_pool { int n; };\nint kv_block_pool_n(void);\n"}
        with Tree(tree) as t:
            self.assertEqual(t.problems(), [])
        self.assert_one_problem({**tree, "actors/api_server/x.h": clean.replace("#endif", "int api_foo(void);\n#endif")},
                                "actors/api_server/x.h:14", ["`api_foo`", "`api_server_`", "actors/README.md"])
        # An old prefix is caught even in a header named for it, and in any actor folder.
        self.assert_one_problem({"actors/api_server/api_foo.h": "int api_foo_get(void);\n"},
                                "actors/api_server/api_foo.h:1", ["`api_foo_get`"])
        self.assert_one_problem({"actors/gpu_worker/w.h": "\n#define INPROC_MAX 3\n"},
                                "actors/gpu_worker/w.h:2", ["`INPROC_MAX`", "`input_processor_`"])
        self.assert_one_problem({"actors/scheduler/s.h": "typedef int (*outproc_fn)(void);\n"},
                                "actors/scheduler/s.h:1", ["`outproc_fn`"])
        # The folder's own first word: only with the rest, or as the header's own stem.
        with Tree({"actors/kv_manager/kv_manager.h": "struct kv_step { int n; };\nenum { KV_A, KV_B };\n"}) as t:
            problems = t.problems()
        self.assertEqual(len(problems), 3, problems)
        self.assertTrue(all("a short form of `kv_manager_`" in p for p in problems), problems)


if __name__ == "__main__":
    unittest.main(verbosity=2)
