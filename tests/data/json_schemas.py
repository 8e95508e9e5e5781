"""JSON schemas for structured output (tests/model/test_structured.py): nested objects, arrays,
enums, integers with bounds, optional fields, formats, patterns, unions, references and unicode.
Free strings and arrays carry bounds, so that an answer ends well within max_tokens on any CPU."""

S = {"type": "string", "maxLength": 24}

SCHEMAS = {
    "name": {"type": "object", "properties": {"name": S}, "required": ["name"], "additionalProperties": False},
    "score 0-10": {"type": "object", "properties": {"score": {"type": "integer", "minimum": 0, "maximum": 10}},
                   "required": ["score"], "additionalProperties": False},
    "adult age": {"type": "object", "properties": {"age": {"type": "integer", "minimum": 18}},
                  "required": ["age"], "additionalProperties": False},
    "negative range": {"type": "object", "properties": {"t": {"type": "integer", "minimum": -50, "maximum": -10}},
                       "required": ["t"], "additionalProperties": False},
    "exclusive bounds": {"type": "object", "properties": {
        "n": {"type": "integer", "exclusiveMinimum": 99, "exclusiveMaximum": 1000}}, "required": ["n"],
        "additionalProperties": False},
    "wide range": {"type": "object", "properties": {"v": {"type": "integer", "minimum": -1234, "maximum": 56789}},
                   "required": ["v"], "additionalProperties": False},
    "boolean": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
                "additionalProperties": False},
    "nullable": {"type": "object", "properties": {"note": {"type": ["string", "null"], "maxLength": 24}},
                 "required": ["note"], "additionalProperties": False},
    "enum": {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}}, "required": ["colour"],
             "additionalProperties": False},
    "mixed enum": {"type": "object", "properties": {"v": {"enum": [1, "two", 3.5, None, True]}}, "required": ["v"],
                   "additionalProperties": False},
    "const": {"type": "object", "properties": {"kind": {"const": "invoice"}, "id": {"type": "integer", "minimum": 1,
              "maximum": 999}}, "required": ["kind", "id"], "additionalProperties": False},
    "int array": {"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "integer", "minimum": 0,
                  "maximum": 99}, "minItems": 2, "maxItems": 4}}, "required": ["xs"], "additionalProperties": False},
    "enum array": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 3},
    "nested": {"type": "object", "properties": {"user": {"type": "object", "properties": {"name": S, "age": {
        "type": "integer", "minimum": 0, "maximum": 130}}, "required": ["name", "age"], "additionalProperties": False}},
        "required": ["user"], "additionalProperties": False},
    "three levels": {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {
        "type": "object", "properties": {"c": {"type": "boolean"}}, "required": ["c"], "additionalProperties": False}},
        "required": ["b"], "additionalProperties": False}}, "required": ["a"], "additionalProperties": False},
    "array of objects": {"type": "object", "properties": {"items": {"type": "array", "maxItems": 3, "items": {
        "type": "object", "properties": {"sku": S, "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["sku", "qty"], "additionalProperties": False}}}, "required": ["items"],
        "additionalProperties": False},
    "tuple": {"type": "array", "prefixItems": [S, {"type": "integer", "minimum": 0, "maximum": 9}], "items": False},
    "any of": {"type": "object", "properties": {"v": {"anyOf": [S, {"type": "integer", "minimum": 0, "maximum": 9}]}},
               "required": ["v"], "additionalProperties": False},
    "one of": {"oneOf": [
        {"type": "object", "properties": {"cat": S}, "required": ["cat"], "additionalProperties": False},
        {"type": "object", "properties": {"dog": {"type": "integer", "minimum": 0, "maximum": 5}}, "required": ["dog"],
         "additionalProperties": False}]},
    "all of": {"allOf": [{"type": "object", "properties": {"a": S}, "required": ["a"]},
                         {"type": "object", "properties": {"b": {"type": "boolean"}}, "required": ["b"]}]},
    "ref": {"type": "object", "$defs": {"point": {"type": "object", "properties": {
        "x": {"type": "integer", "minimum": -9, "maximum": 9}, "y": {"type": "integer", "minimum": -9, "maximum": 9}},
        "required": ["x", "y"], "additionalProperties": False}},
        "properties": {"from": {"$ref": "#/$defs/point"}, "to": {"$ref": "#/$defs/point"}}, "required": ["from", "to"],
        "additionalProperties": False},
    "date": {"type": "object", "properties": {"day": {"type": "string", "format": "date"}}, "required": ["day"],
             "additionalProperties": False},
    "date-time": {"type": "object", "properties": {"at": {"type": "string", "format": "date-time"}},
                  "required": ["at"], "additionalProperties": False},
    "uuid": {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"}}, "required": ["id"],
             "additionalProperties": False},
    "pattern": {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"}},
                "required": ["code"], "additionalProperties": False},
    "string length": {"type": "object", "properties": {"word": {"type": "string", "minLength": 5, "maxLength": 10}},
                      "required": ["word"], "additionalProperties": False},
    "chinese enum": {"type": "object", "properties": {"颜色": {"enum": ["红色", "绿色", "蓝色"]}}, "required": ["颜色"],
                     "additionalProperties": False},
    "chinese const": {"type": "object", "properties": {"问候": {"const": "你好，世界"}, "次数": {"type": "integer",
                      "minimum": 1, "maximum": 3}}, "required": ["问候", "次数"], "additionalProperties": False},
    "optional fields": {"type": "object", "properties": {"title": S, "subtitle": S, "pages": {
        "type": "integer", "minimum": 1, "maximum": 999}}, "required": ["title"], "additionalProperties": False},
    "number": {"type": "object", "properties": {"price": {"type": "number"}}, "required": ["price"],
               "additionalProperties": False},
    "matrix": {"type": "object", "properties": {"m": {"type": "array", "minItems": 2, "maxItems": 2, "items": {
        "type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "integer", "minimum": 0, "maximum": 9}}}},
        "required": ["m"], "additionalProperties": False},
    "empty object": {"type": "object", "properties": {}, "additionalProperties": False},
    "string list": {"type": "object", "properties": {"tags": {"type": "array", "maxItems": 4, "items": {
        "type": "string", "maxLength": 12}}}, "required": ["tags"], "additionalProperties": False},
    "recipe": {"type": "object", "properties": {
        "title": S, "minutes": {"type": "integer", "minimum": 1, "maximum": 240},
        "difficulty": {"enum": ["easy", "medium", "hard"]},
        "steps": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": "string", "maxLength": 30}}},
        "required": ["title", "minutes", "difficulty", "steps"], "additionalProperties": False},
}

# Features the grammar cannot enforce: refused by name (the keyword, and where it is).
UNSUPPORTED = {
    "uniqueItems": ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "'uniqueItems'"),
    "not": ({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}, "'not'"),
    "patternProperties": ({"type": "object", "patternProperties": {"^x": {"type": "string"}}},
                          "'patternProperties'"),
    "multipleOf": ({"type": "integer", "multipleOf": 5}, "'multipleOf'"),
    "number bounds": ({"type": "number", "minimum": 0.5}, "'minimum' (bounds are enforced on integers only)"),
    "format email": ({"type": "string", "format": "email"}, "format 'email'"),
    "remote ref": ({"$ref": "https://example.com/schema.json"}, "a non-local $ref"),
    "if/then": ({"type": "object", "if": {"properties": {"a": {"const": 1}}}, "then": {"required": ["b"]}}, "'if'"),
}
