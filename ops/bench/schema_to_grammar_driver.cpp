// Compile one JSON Schema with llama.cpp's json_schema_to_grammar (common/json-schema-to-grammar.cpp),
// for ops/bench/schema-coverage-peers.py.
//
//   schema_to_grammar_driver SCHEMA_FILE
//
// stdout: the GBNF grammar, exit 0. A schema llama.cpp refuses: its message on stderr, exit 2.
// llama.cpp's own warnings ("JSON schema conversion was incomplete: pattern ... accepting any
// string") go to stderr with exit 0: compiled, but not as written. Exit 1: the file is unreadable.
//
// Built by schema-coverage-peers.py against the llama.cpp sources of the llama-cpp-python sdist
// (json-schema-to-grammar.cpp, json-schema.cpp, json.cpp, trie.cpp, unicode.cpp). The four
// functions below are the only ones those files take from common.cpp and ggml, whose other
// dependencies (the model, the backends) the converter never uses.
#include "json-schema-to-grammar.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

std::string string_join(const std::vector<std::string> & values, const std::string & separator) {
    std::string out;
    for (size_t i = 0; i < values.size(); i++) {
        if (i > 0) {
            out += separator;
        }
        out += values[i];
    }
    return out;
}

std::vector<std::string> string_split(const std::string & str, const std::string & delimiter) {
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t end; (end = str.find(delimiter, start)) != std::string::npos; start = end + delimiter.size()) {
        parts.push_back(str.substr(start, end - start));
    }
    parts.push_back(str.substr(start));
    return parts;
}

std::string string_repeat(const std::string & str, size_t n) {
    std::string out;
    out.reserve(str.size() * n);
    for (size_t i = 0; i < n; i++) {
        out += str;
    }
    return out;
}

extern "C" [[noreturn]] void ggml_abort(const char * file, int line, const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

int main(int argc, char ** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCHEMA_FILE\n", argv[0]);
        return 1;
    }
    std::ifstream in(argv[1], std::ios::binary);
    if (!in) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 1;
    }
    std::stringstream text;
    text << in.rdbuf();
    try {
        std::string grammar = json_schema_to_grammar(common_json::parse(text.str()), /* force_gbnf= */ true);
        fputs(grammar.c_str(), stdout);
        return 0;
    } catch (const std::exception & e) {
        fprintf(stderr, "%s\n", e.what());
        return 2;
    }
}
