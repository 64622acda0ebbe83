import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetNetwork
@testable import SignetTUF
import SignetTestSupport
import SignetCryptoTestSupport

/// Issue 37: the TUF metadata reader's pieces against their references: canonical JSON against
/// securesystemslib's own encoder, RSASSA-PSS with any salt length against Wycheproof, hostile
/// metadata refused by name, delegation path patterns as python-tuf matches them.
@Suite("TUF metadata: canonical JSON, keys, hostile documents, delegations")
struct TUFTests {
    @Test("canonical JSON is byte for byte securesystemslib's encode_canonical, also for hostile strings and key orders")
    func canonicalMatchesSecuresystemslib() throws {
        let document = #"""
            {"z": 1, "a": {"y": [true, false, null, -0, 12345678901234], "b": "quote \" back \\ slash"},
             "é": "ünïcödé", "\u00e9\u0301": "combining", "😀": "astral", "A": "\n\t\u0000 controls", "": "empty key",
             "nested": [[], {}, [{"k": "v"}]], "big": 9007199254740993}
            """#
        let ours = try TUFJSON.parse(Array(document.utf8)).canonical
        let script =
            "import json, sys; from securesystemslib.formats import encode_canonical; sys.stdout.buffer.write(encode_canonical(json.loads(sys.stdin.read())).encode())"
        let theirs = try run("python3", ["-c", script], input: Data(document.utf8))
        try #require(theirs.status == 0, "\(theirs.stderr)")
        #expect(Data(ours) == theirs.stdout, "ours: \(String(decoding: ours, as: UTF8.self))\ntheirs: \(theirs.stdoutText)")
        // The file form escapes what the canonical form leaves raw, and reads back the same.
        let serialized = try TUFJSON.parse(Array(document.utf8)).serialized
        #expect(try TUFJSON.parse(serialized).canonical == ours)
    }

    struct File: Decodable {
        let testGroups: [Group]
    }

    struct Group: Decodable {
        let publicKeyPem: String
        let tests: [Case]
    }

    struct Case: Decodable {
        let tcId: Int
        let msg: String
        let sig: String
        let result: String
        let comment: String
    }

    static let pssFiles = ["rsa_pss_2048_sha256_mgf1_32_test.json", "rsa_pss_2048_sha256_mgf1_0_test.json", "rsa_pss_3072_sha256_mgf1_32_test.json"]

    @Test("rsassa-pss-sha256 keys verify as securesystemslib does (any salt length) and agree with Wycheproof", arguments: pssFiles)
    func pssAgreesWithWycheproof(name: String) throws {
        let file = try JSONDecoder().decode(File.self, from: contents(Fixtures.vectors + "/" + name))
        for group in file.testGroups {
            let json = TUFJSON.object([
                ("keytype", .string("rsa")), ("scheme", .string("rsassa-pss-sha256")),
                ("keyval", .object([("public", .string(group.publicKeyPem))]))
            ])
            let key = try TUFKey(json: json)
            for test in group.tests where test.result != "acceptable" {
                let verified = key.verifies([UInt8](hex: test.sig) ?? [], over: [UInt8](hex: test.msg) ?? [])
                // securesystemslib verifies PSS with any salt length (cryptography's PSS.AUTO):
                // Wycheproof's "s_len changed" signatures are valid to it, and so to Signet's
                // TUF client. Every other invalid signature is refused.
                let expected = test.result == "valid" || test.comment.hasPrefix("s_len changed")
                #expect(verified == expected, "\(name) tcId \(test.tcId): \(test.result) \(test.comment)")
            }
        }
    }

    static func root(_ mutate: (inout [String: Any]) -> Void = { _ in }) throws -> [UInt8] {
        var signed: [String: Any] = [
            "_type": "root", "spec_version": "1.0.31", "version": 1, "expires": "2099-01-01T00:00:00Z", "consistent_snapshot": true,
            "keys": [:],
            "roles": [
                "root": ["keyids": [], "threshold": 1], "targets": ["keyids": [], "threshold": 1],
                "snapshot": ["keyids": [], "threshold": 1], "timestamp": ["keyids": [], "threshold": 1]
            ]
        ]
        mutate(&signed)
        return Array(try JSONSerialization.data(withJSONObject: ["signed": signed, "signatures": []]))
    }

    @Test("hostile metadata is refused by name, never trusted and never a crash")
    func hostileMetadata() throws {
        let cases: [(String, [UInt8])] = [
            ("not JSON", Array("{\"signed\":".utf8)),
            ("duplicate key", Array(#"{"signed":{"_type":"root","_type":"targets"},"signatures":[]}"#.utf8)),
            ("version zero", try Self.root { $0["version"] = 0 }),
            (
                "version beyond 64 bits",
                Array(String(decoding: try Self.root(), as: UTF8.self).replacingOccurrences(of: "\"version\":1", with: "\"version\":18446744073709551616").utf8)
            ),
            ("float version", Array(String(decoding: try Self.root(), as: UTF8.self).replacingOccurrences(of: "\"version\":1", with: "\"version\":1.0").utf8)),
            ("spec 2.0", try Self.root { $0["spec_version"] = "2.0.0" }),
            ("spec garbage", try Self.root { $0["spec_version"] = "1.x" }),
            ("expires with offset", try Self.root { $0["expires"] = "2099-01-01T00:00:00+01:00" }),
            (
                "threshold zero",
                try Self.root {
                    $0["roles"] = [
                        "root": ["keyids": [], "threshold": 0], "targets": ["keyids": [], "threshold": 1], "snapshot": ["keyids": [], "threshold": 1],
                        "timestamp": ["keyids": [], "threshold": 1]
                    ]
                }
            ),
            ("a role missing", try Self.root { $0["roles"] = ["root": ["keyids": [], "threshold": 1]] }),
            (
                "a key id twice",
                try Self.root {
                    $0["roles"] = [
                        "root": ["keyids": ["a", "a"], "threshold": 1], "targets": ["keyids": [], "threshold": 1], "snapshot": ["keyids": [], "threshold": 1],
                        "timestamp": ["keyids": [], "threshold": 1]
                    ]
                }
            ),
            ("another role's type", try Self.root { $0["_type"] = "targets" })
        ]
        for (label, bytes) in cases {
            #expect(throws: SignetError.self, "\(label)") { _ = try TUFTrustedSet(root: bytes, now: .now) }
        }
        // Well-formed but unsigned: the threshold of one is not met.
        do {
            _ = try TUFTrustedSet(root: try Self.root(), now: .now)
            Issue.record("an unsigned root was trusted")
        } catch let error as SignetError {
            #expect(error.code == .thresholdNotMet, "\(error)")
        }
    }

    @Test("delegation paths match as python-tuf's fnmatch per path part; hash prefixes and succinct bins")
    func delegationPaths() throws {
        func role(_ paths: [String]) throws -> TUFDelegatedRole {
            try TUFDelegatedRole(
                json: .object([
                    ("name", .string("r")), ("keyids", .array([])), ("threshold", .number("1")),
                    ("terminating", .bool(false)), ("paths", .array(paths.map(TUFJSON.string)))
                ]))
        }
        let script =
            "import fnmatch, sys, json; from tuf.api.metadata import DelegatedRole; cases = json.load(sys.stdin); print(json.dumps([DelegatedRole('r', [], 1, False, paths=[p]).is_delegated_path(t) for p, t in cases]))"
        let cases: [(String, String)] = [
            ("*", "a"), ("*", "a/b"), ("a/*", "a/b"), ("a/*", "a/b/c"), ("*.zip", "app.zip"), ("app-?.zip", "app-1.zip"),
            ("app-?.zip", "app-10.zip"), ("[ab]*", "beta"), ("[!ab]*", "beta"), ("dir/", "dir/"), ("\\*", "*"), ("", "")
        ]
        let input = try JSONSerialization.data(withJSONObject: cases.map { [$0.0, $0.1] })
        let theirs = try run("python3", ["-c", script], input: input)
        try #require(theirs.status == 0, "\(theirs.stderr)")
        let expected = try JSONSerialization.jsonObject(with: theirs.stdout) as? [Bool] ?? []
        for (index, (pattern, target)) in cases.enumerated() {
            #expect(try role([pattern]).matches(target) == expected[index], "pattern '\(pattern)' target '\(target)'")
        }
        let prefixed = try TUFDelegatedRole(
            json: .object([
                ("name", .string("bin")), ("keyids", .array([])), ("threshold", .number("1")),
                ("terminating", .bool(false)), ("path_hash_prefixes", .array([.string("a6")]))
            ]))
        // SHA-256("app.zip") starts with a6.
        let digest = try Digest.compute(Array("app.zip".utf8), algorithm: .sha256).hex
        #expect(prefixed.matches("app.zip") == digest.hasPrefix("a6"))
        let bins = try TUFSuccinctRoles(
            json: .object([("keyids", .array([])), ("threshold", .number("1")), ("bit_length", .number("8")), ("name_prefix", .string("bin"))]))
        let binScript = "import sys; from tuf.api.metadata import SuccinctRoles; print(SuccinctRoles([], 1, 8, 'bin').get_role_for_target(sys.argv[1]))"
        for target in ["app.zip", "a/b/c", "ü"] {
            let python = try run("python3", ["-c", binScript, target])
            #expect(bins.role(for: target) == python.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines), "\(target)")
            #expect(bins.contains(bins.role(for: target)))
        }
        #expect(!bins.contains("bin-100") && !bins.contains("bin-g0") && !bins.contains("other-00"))
    }
}
