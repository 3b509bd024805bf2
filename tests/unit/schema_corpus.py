"""Schemas for the structured-output coverage test (test_schema_coverage.py): written for this
project, keyword by keyword after the topics of the JSON-Schema-Test-Suite (type, enum, const,
lengths, pattern, format, numeric bounds, multipleOf, items / prefixItems, counts, properties,
required, additionalProperties, min/maxProperties, allOf / anyOf / oneOf, $ref, recursion,
boolean schemas, nullable), schemas shaped like real tool and response schemas, a seeded
generator of random nested ones, and the keywords that stay refused (with the word the
refusal must name).

Each case: (name, schema, refused) where refused is None or a word the error must contain.
oneOf alternatives here are disjoint: the engine reads oneOf as anyOf (docs/structured-output.md).
"""
import random

CASES = []
D4 = "http://json-schema.org/draft-04/schema#"
D7 = "http://json-schema.org/draft-07/schema#"


def case(name, schema, refused=None):
    CASES.append((name, schema, refused))


# ---- types ----
for t in ["string", "integer", "number", "boolean", "null", "object", "array"]:
    case(f"type_{t}", {"type": t})
case("type_list_string_null", {"type": ["string", "null"]})
case("type_list_number_bool", {"type": ["number", "boolean"]})
case("type_list_int_string_null", {"type": ["integer", "string", "null"], "maxLength": 2})
case("type_absent_with_string_kw", {"minLength": 2, "maxLength": 3})
case("type_absent_with_number_kw", {"minimum": 5, "maximum": 7})
case("true_schema", True)
case("empty_schema", {})
case("openapi_nullable", {"type": "integer", "nullable": True, "minimum": 0, "maximum": 9})

# ---- enum / const ----
case("enum_strings", {"enum": ["red", "green", "blue"]})
case("enum_mixed", {"enum": [1, "1", None, True, 2.5, [1, 2], {"a": 1}]})
case("enum_with_type", {"type": "string", "enum": ["a", 1, "b", None]})
case("enum_with_bounds", {"type": "integer", "enum": [1, 5, 10, 15], "minimum": 4, "maximum": 12})
case("enum_prefix_values", {"enum": ["a", "ab", "abc", "b"]})
case("enum_nested_objects", {"enum": [{"k": [1, {"x": None}]}, {"k": []}]})
case("enum_unicode", {"enum": ["é", "日本", "a\"b", "tab\there", "\u0001"]})
case("enum_numbers", {"enum": [0, -1, 0.5, -2.25, 100, 1e3]})
case("enum_many", {"enum": [f"v{i}" for i in range(150)]})
case("const_string", {"const": "fixed"})
case("const_object", {"const": {"a": [1, True], "b": None}})
case("const_null", {"const": None})
case("const_number", {"const": 3.5})
case("const_in_object", {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
                          "required": ["kind", "r"], "additionalProperties": False})
case("enum_and_const", {"enum": ["a", "b", "c"], "const": "b"})
case("enum_two_enums", {"allOf": [{"enum": [1, 2, 3, 4]}, {"enum": [3, 4, 5]}]})

# ---- strings ----
case("min_length", {"type": "string", "minLength": 3})
case("max_length", {"type": "string", "maxLength": 2})
case("length_range", {"type": "string", "minLength": 1, "maxLength": 4})
case("length_zero", {"type": "string", "maxLength": 0})
case("pattern_anchored", {"type": "string", "pattern": "^[a-z]+$"})
case("pattern_unanchored", {"type": "string", "pattern": "ab"})
case("pattern_start_only", {"type": "string", "pattern": "^x"})
case("pattern_end_only", {"type": "string", "pattern": "[0-9]$"})
case("pattern_alternation_anchors", {"type": "string", "pattern": "^a|b$"})
case("pattern_phone", {"type": "string", "pattern": "^\\+?[0-9]{1,3}-[0-9]{3}-[0-9]{4}$"})
case("pattern_semver", {"type": "string", "pattern": "^(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)$"})
case("pattern_with_length", {"type": "string", "pattern": "^(ab)+$", "maxLength": 5})
case("pattern_with_min_length", {"type": "string", "pattern": "^[ab]*$", "minLength": 3, "maxLength": 4})
case("pattern_dot", {"type": "string", "pattern": "^a.c$"})
case("pattern_escape_quote", {"type": "string", "pattern": "^\"[a-z]*\"$"})
case("pattern_backslash", {"type": "string", "pattern": "^a\\\\b$"})
case("pattern_newline", {"type": "string", "pattern": "^a\\nb$"})
case("pattern_unicode", {"type": "string", "pattern": "^é+$"})
case("pattern_classes", {"type": "string", "pattern": "^\\w+@\\w+\\.\\w{2,3}$"})
case("pattern_optional_group", {"type": "string", "pattern": "^(Mr|Ms)?\\.? ?[A-Z][a-z]*$"})
case("pattern_two_in_allof", {"allOf": [{"type": "string", "pattern": "a"}, {"pattern": "^[abc]{2,4}$"}]})
case("pattern_nonstring_ignored", {"pattern": "^a$"})
case("pattern_key_value", {"type": "object", "additionalProperties": {"type": "string", "pattern": "^[0-9a-f]{2}$"}})
for f in ["date", "time", "date-time", "uuid", "email", "uri", "ipv4", "ipv6"]:
    case(f"format_{f}", {"type": "string", "format": f})
case("format_date_in_object", {"type": "object", "properties": {"born": {"type": "string", "format": "date"},
                                                                 "id": {"type": "string", "format": "uuid"}},
                                "required": ["born"], "additionalProperties": False})
case("format_with_length", {"type": "string", "format": "email", "maxLength": 8})
case("format_and_pattern", {"type": "string", "format": "date", "pattern": "^2024-"})
case("format_nonstring", {"format": "date", "type": ["string", "integer"]})

# ---- numbers ----
case("int_min", {"type": "integer", "minimum": 3})
case("int_max", {"type": "integer", "maximum": 17})
case("int_range", {"type": "integer", "minimum": -15, "maximum": 123})
case("int_range_neg", {"type": "integer", "minimum": -250, "maximum": -7})
case("int_exclusive", {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10})
case("int_big_range", {"type": "integer", "minimum": 1000000, "maximum": 99999999})
case("int_min_zero", {"type": "integer", "minimum": 0})
case("int_max_zero", {"type": "integer", "maximum": 0})
case("int_exclusive_zero", {"type": "integer", "exclusiveMaximum": 0})
case("int_fraction_bounds", {"type": "integer", "minimum": 2.5, "maximum": 7.5})
case("int_point", {"type": "integer", "minimum": 42, "maximum": 42})
case("int_empty_range", {"type": "integer", "minimum": 5, "maximum": 4}, refused="no value")
case("int_draft4_exclusive", {"$schema": D4, "type": "integer", "minimum": 1, "exclusiveMinimum": True, "maximum": 5, "exclusiveMaximum": True})
case("num_min", {"type": "number", "minimum": 1.5})
case("num_max", {"type": "number", "maximum": -0.25})
case("num_range", {"type": "number", "minimum": -1, "maximum": 1})
case("num_exclusive", {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.5})
case("num_latitude", {"type": "number", "minimum": -90, "maximum": 90})
case("num_small_decimals", {"type": "number", "minimum": 0.001, "maximum": 0.0125})
case("num_excl_neg", {"type": "number", "exclusiveMinimum": -2.5, "exclusiveMaximum": -1})
case("num_both_excl_same", {"type": "number", "exclusiveMinimum": 1, "exclusiveMaximum": 1}, refused="no value")
case("num_min_zero_excl", {"type": "number", "exclusiveMinimum": 0})
case("int_multiple", {"type": "integer", "multipleOf": 7})
case("int_multiple_range", {"type": "integer", "multipleOf": 5, "minimum": -20, "maximum": 33})
case("int_multiple_frac", {"type": "integer", "multipleOf": 0.5})
case("int_multiple_decimal", {"type": "integer", "multipleOf": 2.5, "maximum": 40})
case("num_multiple_quarter", {"type": "number", "multipleOf": 0.25, "minimum": -3, "maximum": 3})
case("num_multiple_cents", {"type": "number", "multipleOf": 0.01, "minimum": 0, "maximum": 100})
case("num_multiple_int", {"type": "number", "multipleOf": 3})
case("num_multiple_two", {"allOf": [{"type": "number", "multipleOf": 2}, {"multipleOf": 3}]})
case("num_bounds_allof", {"allOf": [{"type": "number", "minimum": 0}, {"maximum": 10}, {"exclusiveMaximum": 5}]})
case("num_exponent_bound", {"type": "number", "maximum": 1e-3})
case("num_big_bound", {"type": "integer", "maximum": 1e12})

# ---- arrays ----
case("array_items", {"type": "array", "items": {"type": "integer"}})
case("array_bounds", {"type": "array", "items": {"type": "string", "maxLength": 1}, "minItems": 1, "maxItems": 3})
case("array_empty_only", {"type": "array", "maxItems": 0})
case("array_prefix", {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]})
case("array_prefix_items", {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
                            "items": {"type": "boolean"}})
case("array_prefix_closed", {"type": "array", "prefixItems": [{"const": 1}, {"const": 2}], "items": False})
case("array_prefix_min", {"type": "array", "prefixItems": [{"type": "null"}], "items": {"type": "number"}, "minItems": 3})
case("array_draft7_tuple", {"$schema": D7, "type": "array", "items": [{"type": "integer"}, {"type": "string"}], "additionalItems": False})
case("array_draft7_additional", {"$schema": D7, "type": "array", "items": [{"type": "integer"}], "additionalItems": {"type": "null"}})
case("array_items_false", {"type": "array", "items": False})
case("array_false_prefix", {"type": "array", "prefixItems": [{"type": "integer"}, False], "items": {"type": "string"}})
case("array_nested", {"type": "array", "items": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
                                                  "maxItems": 2}, "maxItems": 3})
case("array_min_impossible", {"type": "array", "items": False, "minItems": 1}, refused="no value")
case("array_untyped_items", {"items": {"type": "integer"}})
case("array_unique_one", {"type": "array", "uniqueItems": True, "maxItems": 1})
case("array_allof_merge", {"allOf": [{"type": "array", "prefixItems": [{"type": "integer"}]},
                                     {"prefixItems": [{"minimum": 3}, {"type": "string"}]}]})

# ---- objects ----
case("obj_required", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
                      "required": ["a", "b"], "additionalProperties": False})
case("obj_optional", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
                                                        "c": {"type": "boolean"}}, "required": ["b"]})
case("obj_additional_true", {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": True})
case("obj_additional_schema", {"type": "object", "properties": {"a": {"type": "integer"}},
                               "additionalProperties": {"type": "string"}})
case("obj_only_additional", {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}})
case("obj_no_props", {"type": "object"})
case("obj_empty_closed", {"type": "object", "additionalProperties": False})
case("obj_required_undeclared", {"type": "object", "required": ["x"]})
case("obj_required_undeclared_closed", {"type": "object", "required": ["x"], "additionalProperties": False},
     refused="no value")
case("obj_max_props", {"type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "maxProperties": 2})
case("obj_max_props_required", {"type": "object", "properties": {"a": {"type": "null"}, "b": {"type": "null"},
                                                                  "c": {"type": "null"}}, "required": ["c"],
                                "maxProperties": 2, "additionalProperties": {"type": "null"}})
case("obj_min_props_named", {"type": "object", "properties": {"a": {"type": "null"}, "b": {"type": "null"},
                                                               "c": {"type": "null"}}, "minProperties": 2})
case("obj_min_max_props", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                           "minProperties": 1, "maxProperties": 1})
# other keys count once towards minProperties (two could be the same key): exact up to required + 1
case("obj_min_props_open", {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1})
case("obj_min_props_optional_open", {"type": "object", "properties": {"a": {}, "b": {}},
                                    "additionalProperties": {"type": "integer"}, "minProperties": 1})
case("obj_min_props_any_object", {"type": "object", "minProperties": 1})
case("obj_min_props_required_plus_one", {"type": "object", "properties": {"a": {"type": "null"}, "b": {"type": "null"}},
                                        "required": ["a"], "additionalProperties": {"type": "boolean"},
                                        "minProperties": 2})
case("obj_min_max_props_open", {"type": "object", "additionalProperties": {"type": "null"}, "minProperties": 1,
                                "maxProperties": 2})
case("obj_min_props_open_two", {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 2},
     refused="minProperties")
case("obj_min_over_max_props", {"type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "minProperties": 2,
                                "maxProperties": 1}, refused="no value")
case("obj_min_over_max_props_open", {"type": "object", "minProperties": 1, "maxProperties": 0}, refused="no value")
case("obj_min_props_required_open", {"type": "object", "properties": {"a": {"type": "null"}, "b": {"type": "null"}},
                                    "required": ["a", "b"], "additionalProperties": {"type": "integer"},
                                    "minProperties": 2, "maxProperties": 3})
case("obj_escaped_names", {"type": "object", "properties": {"a\"b": {"type": "integer"}, "c\\d": {"type": "null"},
                                                             "é": {"type": "boolean"}}, "additionalProperties": False})
case("obj_names_vs_free", {"type": "object", "properties": {"a": {"type": "integer"}, "ab": {"type": "null"}},
                           "additionalProperties": {"type": "string"}})
case("obj_false_prop", {"type": "object", "properties": {"a": False, "b": {"type": "integer"}},
                        "additionalProperties": True})
case("obj_false_required", {"type": "object", "properties": {"a": False}, "required": ["a"]}, refused="no value")
case("obj_true_prop", {"type": "object", "properties": {"any": True}, "required": ["any"]})
case("obj_nested", {"type": "object", "properties": {"p": {"type": "object", "properties": {"q": {"type": "array",
                    "items": {"type": "integer"}}}, "required": ["q"], "additionalProperties": False}},
                    "required": ["p"], "additionalProperties": False})
case("obj_untyped_props", {"properties": {"a": {"type": "integer"}}, "required": ["a"]})

# ---- allOf / anyOf / oneOf ----
case("allof_object_merge", {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                                      {"properties": {"b": {"type": "string"}}, "required": ["b"]}]})
case("allof_with_base", {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
                         "allOf": [{"properties": {"name": {"type": "string"}}}]})
case("allof_closed_member", {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}},
                                        "additionalProperties": False},
                                       {"properties": {"b": {"type": "integer"}}}]})
case("allof_types", {"allOf": [{"type": ["string", "integer"]}, {"type": ["integer", "null"]}]})
case("allof_conflict", {"allOf": [{"type": "string"}, {"type": "integer"}]}, refused="no value")
case("allof_ref_and_extend", {"$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer"}},
                                                  "required": ["id"]}},
                              "allOf": [{"$ref": "#/$defs/base"}, {"properties": {"tag": {"enum": ["x", "y"]}},
                                                                   "required": ["tag"]}]})
case("allof_prop_intersection", {"type": "object", "properties": {"n": {"type": "number", "minimum": 0}},
                                 "allOf": [{"properties": {"n": {"type": "integer", "maximum": 5}}}],
                                 "required": ["n"]})
case("anyof_scalars", {"anyOf": [{"type": "string", "maxLength": 2}, {"type": "integer", "minimum": 10}]})
case("anyof_with_base", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
                         "anyOf": [{"required": ["a"]}, {"required": ["b"]}], "additionalProperties": False})
case("anyof_with_base_bounds", {"type": "integer", "minimum": 0, "maximum": 100,
                                "anyOf": [{"maximum": 10}, {"minimum": 90}]})
case("anyof_nested", {"anyOf": [{"anyOf": [{"type": "null"}, {"type": "boolean"}]}, {"type": "string", "const": "z"}]})
case("anyof_two_lists", {"type": "string", "anyOf": [{"pattern": "^a"}, {"pattern": "^b"}],
                         "allOf": [{"anyOf": [{"pattern": "x$"}, {"maxLength": 2}]}]})
case("anyof_objects", {"anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                                  "additionalProperties": False},
                                 {"type": "object", "properties": {"b": {"type": "null"}}, "required": ["b"],
                                  "additionalProperties": False}]})
case("anyof_nullable_ref", {"$defs": {"p": {"type": "object", "properties": {"x": {"type": "number"}},
                                            "required": ["x"], "additionalProperties": False}},
                            "type": "object", "properties": {"pt": {"anyOf": [{"$ref": "#/$defs/p"}, {"type": "null"}]}},
                            "required": ["pt"], "additionalProperties": False})
case("oneof_types", {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]})
case("oneof_discriminated", {"oneOf": [
    {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind", "x"],
     "additionalProperties": False},
    {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string"}}, "required": ["kind"],
     "additionalProperties": False}]})
case("oneof_ranges", {"type": "integer", "oneOf": [{"maximum": -1}, {"minimum": 0, "maximum": 9}, {"minimum": 100}]})
case("oneof_in_allof", {"allOf": [{"oneOf": [{"type": "string"}, {"type": "boolean"}]},
                                  {"anyOf": [{"const": "s"}, {"const": True}, {"const": 3}]}]})
case("anyof_single", {"anyOf": [{"type": "integer", "minimum": 1}]})
case("anyof_all_false", {"anyOf": [False, {"type": "string", "maxLength": 1, "minLength": 2}]}, refused="no value")

# ---- $ref ----
case("ref_defs", {"$defs": {"n": {"type": "integer", "minimum": 1}}, "$ref": "#/$defs/n"})
case("ref_definitions_nested", {"definitions": {"outer": {"definitions": {"inner": {"type": "string", "maxLength": 3}}}},
                                "type": "array", "items": {"$ref": "#/definitions/outer/definitions/inner"}})
case("ref_into_properties", {"type": "object", "properties": {"a": {"type": "integer", "maximum": 3},
                                                               "b": {"$ref": "#/properties/a"}},
                             "additionalProperties": False})
case("ref_into_anyof_item", {"type": "object", "properties": {"a": {"anyOf": [{"type": "string", "pattern": "^q"},
                                                                               {"type": "null"}]},
                                                               "b": {"$ref": "#/properties/a/anyOf/0"}},
                             "additionalProperties": False})
case("ref_escaped_pointer", {"$defs": {"a/b": {"const": 1}, "c~d": {"const": 2}, "e%f": {"const": 3}},
                             "type": "array", "prefixItems": [{"$ref": "#/$defs/a~1b"}, {"$ref": "#/$defs/c~0d"},
                                                              {"$ref": "#/$defs/e%25f"}], "items": False})
case("ref_with_siblings", {"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s", "maxLength": 2})
case("ref_root_recursion", {"type": "object", "properties": {"next": {"$ref": "#"}, "v": {"type": "integer"}},
                            "required": ["v"], "additionalProperties": False})
case("ref_tree", {"$defs": {"node": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 3},
                                                                       "kids": {"type": "array",
                                                                                "items": {"$ref": "#/$defs/node"},
                                                                                "maxItems": 2}},
                                     "required": ["name"], "additionalProperties": False}},
                  "$ref": "#/$defs/node"})
case("ref_mutual", {"$defs": {"a": {"type": "array", "items": {"$ref": "#/$defs/b"}, "maxItems": 2},
                              "b": {"anyOf": [{"type": "integer"}, {"$ref": "#/$defs/a"}]}},
                    "$ref": "#/$defs/b"})
case("ref_json_value", {"$defs": {"v": {"anyOf": [{"type": ["null", "boolean", "number", "string"]},
                                                  {"type": "array", "items": {"$ref": "#/$defs/v"}},
                                                  {"type": "object", "additionalProperties": {"$ref": "#/$defs/v"}}]}},
                        "$ref": "#/$defs/v"})
case("ref_cycle", {"$ref": "#"}, refused="cycle")
case("ref_cycle_anyof", {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}, "$ref": "#/$defs/a"},
     refused="cycle")
case("ref_unproductive", {"type": "object", "properties": {"self": {"$ref": "#"}}, "required": ["self"]},
     refused="no value")
case("ref_remote", {"$ref": "https://example.com/schema.json"}, refused="$ref")
case("ref_missing", {"$ref": "#/$defs/nope"}, refused="names no schema")

# ---- shaped like real schemas ----
case("tool_weather", {"type": "object", "properties": {
    "location": {"type": "string", "description": "City and country"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 14}}, "required": ["location"], "additionalProperties": False})
case("openai_strict_event", {"type": "object", "properties": {
    "name": {"type": "string"}, "date": {"type": "string", "format": "date"},
    "participants": {"type": "array", "items": {"type": "string"}}},
    "required": ["name", "date", "participants"], "additionalProperties": False})
case("address", {"type": "object", "properties": {
    "street": {"type": "string", "minLength": 1}, "zip": {"type": "string", "pattern": "^[0-9]{5}(-[0-9]{4})?$"},
    "country": {"type": "string", "enum": ["US", "FR", "DE"]}, "lat": {"type": "number", "minimum": -90, "maximum": 90}},
    "required": ["zip", "country"], "additionalProperties": False})
case("product", {"type": "object", "properties": {
    "id": {"type": "string", "format": "uuid"}, "price": {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.01},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3},
    "stock": {"type": ["integer", "null"], "minimum": 0}}, "required": ["id", "price"], "additionalProperties": False})
case("user_profile", {"$defs": {"email": {"type": "string", "format": "email"}}, "type": "object", "properties": {
    "email": {"$ref": "#/$defs/email"}, "backup": {"anyOf": [{"$ref": "#/$defs/email"}, {"type": "null"}]},
    "age": {"type": "integer", "minimum": 13, "maximum": 120}, "site": {"type": "string", "format": "uri"}},
    "required": ["email"], "additionalProperties": False})
case("log_entry", {"type": "object", "properties": {
    "ts": {"type": "string", "format": "date-time"}, "level": {"enum": ["debug", "info", "warn", "error"]},
    "ip": {"type": "string", "format": "ipv4"}, "msg": {"type": "string", "maxLength": 10}},
    "required": ["ts", "level"], "additionalProperties": False})
case("calendar_slot", {"type": "object", "properties": {
    "start": {"type": "string", "format": "time"}, "minutes": {"type": "integer", "multipleOf": 15, "minimum": 15,
                                                               "maximum": 240}},
    "required": ["start", "minutes"], "additionalProperties": False})
case("matrix", {"type": "array", "items": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}],
                                            "items": False, "minItems": 2}, "minItems": 1, "maxItems": 2})
case("shape_union", {"$defs": {
    "circle": {"type": "object", "properties": {"type": {"const": "circle"}, "r": {"type": "number", "exclusiveMinimum": 0}},
               "required": ["type", "r"], "additionalProperties": False},
    "rect": {"type": "object", "properties": {"type": {"const": "rect"}, "w": {"type": "integer", "minimum": 1},
                                              "h": {"type": "integer", "minimum": 1}},
             "required": ["type", "w", "h"], "additionalProperties": False}},
    "type": "array", "items": {"oneOf": [{"$ref": "#/$defs/circle"}, {"$ref": "#/$defs/rect"}]}, "maxItems": 3})
case("settings_map", {"type": "object", "properties": {"version": {"const": 2}}, "required": ["version"],
                      "additionalProperties": {"type": ["string", "boolean"], "maxLength": 3}})
case("pydantic_style", {"$defs": {"Item": {"properties": {"name": {"title": "Name", "type": "string"},
                                                            "qty": {"default": 1, "title": "Qty", "type": "integer",
                                                                    "exclusiveMinimum": 0}},
                                             "required": ["name"], "title": "Item", "type": "object"}},
                        "properties": {"items": {"items": {"$ref": "#/$defs/Item"}, "title": "Items", "type": "array"},
                                       "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}},
                        "required": ["items"], "title": "Order", "type": "object"})
case("draft4_style", {"$schema": "http://json-schema.org/draft-04/schema#", "definitions": {
    "pos": {"type": "number", "minimum": 0, "exclusiveMinimum": True}},
    "type": "object", "properties": {"w": {"$ref": "#/definitions/pos"}, "h": {"$ref": "#/definitions/pos"}},
    "required": ["w", "h"], "additionalProperties": False})

# ---- refused, naming why ----
case("refuse_not", {"not": {"type": "string"}}, refused="not")
case("refuse_if", {"if": {"type": "string"}, "then": {"minLength": 1}}, refused="if")
case("refuse_pattern_properties", {"type": "object", "patternProperties": {"^x": {"type": "string"}}},
     refused="patternProperties")
case("refuse_property_names", {"type": "object", "propertyNames": {"maxLength": 3}}, refused="propertyNames")
case("refuse_dependent_required", {"type": "object", "dependentRequired": {"a": ["b"]}}, refused="dependentRequired")
case("refuse_contains", {"type": "array", "contains": {"type": "integer"}}, refused="contains")
case("refuse_unique_items", {"type": "array", "uniqueItems": True}, refused="uniqueItems")
case("refuse_unevaluated", {"type": "object", "unevaluatedProperties": False}, refused="unevaluatedProperties")
case("refuse_format_unknown", {"type": "string", "format": "hostname"}, refused="format")
case("refuse_dynamic_ref", {"$dynamicRef": "#meta"}, refused="$dynamicRef")
case("refuse_pattern_backref", {"type": "string", "pattern": "(a)\\1"}, refused="backreference")
case("refuse_pattern_lookahead", {"type": "string", "pattern": "a(?=b)"}, refused="lookaround")
case("refuse_multiple_huge", {"type": "integer", "multipleOf": 100000}, refused="multipleOf")


# ---- generated ----
NAMES = ["a", "b", "id", "name", "x", "tag", "ok", "n"]
PATTERNS = ["^[a-c]+$", "^[0-9]{2}$", "b", "^x|y$", "^(ab|cd)*$", "^[a-z]{1,3}-[0-9]$", "^.{2}$"]
FORMATS = ["date", "time", "uuid", "ipv4", "email", "date-time", "uri"]


def gen_scalar(rng):
    k = rng.randrange(9)
    if k == 0:
        s = {"type": "string"}
        if rng.random() < 0.5:
            s["minLength"] = rng.randrange(3)
        if rng.random() < 0.5:
            s["maxLength"] = s.get("minLength", 0) + rng.randrange(4)
        if rng.random() < 0.4:
            s["pattern"] = rng.choice(PATTERNS)
        return s
    if k == 1:
        return {"type": "string", "format": rng.choice(FORMATS)}
    if k in (2, 3):
        s = {"type": "integer"}
        lo = rng.randrange(-30, 30)
        if rng.random() < 0.6:
            s["exclusiveMinimum" if rng.random() < 0.3 else "minimum"] = lo
        if rng.random() < 0.6:
            s["exclusiveMaximum" if rng.random() < 0.3 else "maximum"] = lo + rng.randrange(1, 200)
        if rng.random() < 0.3:
            s["multipleOf"] = rng.choice([2, 3, 5, 10])
        return s
    if k == 4:
        s = {"type": "number"}
        lo = rng.randrange(-40, 40) / 4
        if rng.random() < 0.6:
            s["exclusiveMinimum" if rng.random() < 0.3 else "minimum"] = lo
        if rng.random() < 0.6:
            s["exclusiveMaximum" if rng.random() < 0.3 else "maximum"] = lo + rng.randrange(1, 40) / 8
        if rng.random() < 0.3:
            s["multipleOf"] = rng.choice([0.5, 0.25, 0.1, 2])
        return s
    if k == 5:
        return {"type": rng.choice(["boolean", "null", "number", "integer", "string"])}
    if k == 6:
        pool = ["a", "b", 1, 2.5, None, True, [1], {"k": "v"}, "", -3]
        return {"enum": rng.sample(pool, rng.randrange(1, 5))}
    if k == 7:
        return {"const": rng.choice(["c", 7, None, False, [True], {"q": 1}])}
    return {"type": [rng.choice(["string", "integer"]), "null"]}


def gen_schema(rng, depth):
    if depth >= 3 or rng.random() < 0.35:
        return gen_scalar(rng)
    k = rng.randrange(6)
    if k == 0:
        names = rng.sample(NAMES, rng.randrange(1, 4))
        s = {"type": "object", "properties": {n: gen_schema(rng, depth + 1) for n in names}}
        s["required"] = [n for n in names if rng.random() < 0.5]
        r = rng.random()
        if r < 0.5:
            s["additionalProperties"] = False
        elif r < 0.65:
            s["additionalProperties"] = gen_scalar(rng)
        elif r < 0.75:
            s["additionalProperties"] = True
        if rng.random() < 0.2 and s.get("additionalProperties") is False:
            s["minProperties"] = rng.randrange(len(names) + 1)
        if rng.random() < 0.2:
            s["maxProperties"] = len(s["required"]) + rng.randrange(2)
        return s
    if k == 1:
        s = {"type": "array", "items": gen_schema(rng, depth + 1)}
        if rng.random() < 0.4:
            s["prefixItems"] = [gen_schema(rng, depth + 1) for _ in range(rng.randrange(1, 3))]
        if rng.random() < 0.4:
            s["minItems"] = rng.randrange(3)
        if rng.random() < 0.5:
            s["maxItems"] = s.get("minItems", 0) + rng.randrange(3)
        return s
    if k == 2:
        alts = [gen_schema(rng, depth + 1) for _ in range(rng.randrange(2, 4))]
        return {"anyOf": alts}
    if k == 3:  # oneOf over distinct types: disjoint
        types = rng.sample(["string", "integer", "boolean", "null", "array"], rng.randrange(2, 4))
        alts = []
        for t in types:
            a = {"type": t}
            if t == "integer" and rng.random() < 0.5:
                a["minimum"] = rng.randrange(-5, 5)
            if t == "string" and rng.random() < 0.5:
                a["maxLength"] = rng.randrange(1, 4)
            if t == "array":
                a["items"] = gen_scalar(rng)
            alts.append(a)
        return {"oneOf": alts}
    if k == 4:  # allOf of two views of one value, mostly of one type
        base = gen_scalar(rng)
        extra = gen_scalar(rng)
        for _ in range(8):
            if extra.get("type") == base.get("type"):
                break
            extra = gen_scalar(rng)
        if rng.random() < 0.5:
            extra.pop("type", None)
        return {"allOf": [base, extra]}
    base = {"type": "object", "properties": {"a": gen_scalar(rng), "b": gen_scalar(rng)}, "additionalProperties": False}
    base["anyOf"] = [{"required": ["a"]}, {"required": ["b"]}]
    return base


def generated(count, seed):
    rng = random.Random(seed)
    return [(f"gen_{i:03d}", gen_schema(rng, 0), None) for i in range(count)]
