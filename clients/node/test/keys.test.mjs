// The key contract against the shared vectors, clients/key-vectors.json.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import {
  escapeKeyToken,
  unescapeKeyToken,
  escapeSubjectToken,
  unescapeSubjectToken,
  objectKey,
  parseKey,
  eventSubject,
  keyFilter,
  eventFilter,
} from "../dist/index.js";

const vectors = JSON.parse(readFileSync(new URL("../../key-vectors.json", import.meta.url), "utf8"));

test("every token vector: escape by both rules, and back", () => {
  assert.ok(vectors.tokens.length > 0);
  for (const v of vectors.tokens) {
    assert.equal(escapeKeyToken(v.text), v.key, `key token of ${JSON.stringify(v.text)}`);
    assert.equal(escapeSubjectToken(v.text), v.subject, `subject token of ${JSON.stringify(v.text)}`);
    assert.equal(unescapeKeyToken(v.key), v.text, `unescape of ${v.key}`);
    assert.equal(unescapeSubjectToken(v.subject), v.text, `subject unescape of ${v.subject}`);
  }
});

test("every whole-key vector: parts to key and subject, key to namespace and name", () => {
  assert.ok(vectors.keys.length > 0);
  for (const v of vectors.keys) {
    const ref = {
      cluster: v.cluster,
      group: v.group,
      version: v.version,
      plural: v.resource,
      namespace: v.namespace,
      name: v.name,
    };
    assert.equal(objectKey(ref), v.key);
    assert.equal(eventSubject({ ...ref, type: "ADDED" }), v.subject);
    assert.deepEqual(parseKey(v.key), { namespace: v.namespace, name: v.name }, v.key);
  }
});

test("filters of the watch and of the durable consumer", () => {
  assert.equal(keyFilter({ group: "", version: "v1", plural: "pods" }), "core.v1.pods.*.*");
  assert.equal(
    keyFilter({ cluster: "eu-1.prod", group: "example.com", version: "*", plural: "widgets", namespace: "team_a" }),
    "eu-1_prod.example_com.*.widgets.team=5Fa.*",
  );
  assert.equal(eventFilter({ group: "", version: "v1", plural: "pods" }), "kube.core.v1.pods.*.*.*");
  assert.equal(
    eventFilter({ prefix: "k", cluster: "east", group: "apps", version: "*", plural: "deployments", namespace: "shop" }),
    "k.east.apps.*.deployments.shop.*.*",
  );
});

test("a header value escaped by the subject rule decodes", () => {
  assert.equal(unescapeSubjectToken("a%0Ab_c"), "a\nb.c");
});

test("what the escape rule never produces is read back as it is", () => {
  assert.equal(unescapeKeyToken("é_=zz=4"), "é.=zz=4");
  assert.equal(unescapeKeyToken("日本=2E"), "日本.");
});
