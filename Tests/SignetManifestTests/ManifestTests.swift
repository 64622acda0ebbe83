import Foundation
import Testing
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetManifest
import SignetTestSupport
import SignetCryptoTestSupport

@Suite("Resource paths, timestamps and the manifest format")
struct ManifestTests {
    @Test("byte order of paths (memcmp over the strings' storage) is the order of their UTF-8 bytes")
    func byteOrder() throws {
        let paths = [
            "", "a", "b", "a/b", "a/b/c", "a.b", "a0", "A", "é", "e\u{301}", "\u{212A}", "K", "z" + String(repeating: "x", count: 40),
            "z" + String(repeating: "x", count: 39), "日本/語.txt", "🙂", "a\u{7F}", "short", "a much longer path/with/several/components.txt"
        ]
        for a in paths {
            for b in paths {
                #expect(ResourcePath.byteOrder(a, b) == a.utf8.lexicographicallyPrecedes(b.utf8), "\(a.debugDescription) < \(b.debugDescription)")
            }
        }
        // A String that is not stored as UTF-8 of its own (bridged from an NSString) still compares.
        let bridged = NSString(string: "a/b/ü").substring(from: 0)
        #expect(ResourcePath.byteOrder(bridged, "a/c") && !ResourcePath.byteOrder("a/c", bridged))
    }

    @Test(
        "resource paths FORMAT.md forbids are refused",
        arguments: [
            ("", "empty"), ("/etc/passwd", "absolute"), ("../x", "'..'"), ("a/../../b", "'..'"), ("a/./b", "'.'"),
            ("a//b", "empty path component"), ("a/", "empty path component"), ("a\\b", "backslash"), ("a\u{0}b", "NUL"),
            ("a\nb", "control character"), ("a\u{7f}", "control character"), ("a\u{85}b", "control character"),
            (".signet/manifest.json", "under .signet/"), (".signet/x", "under .signet/"),
            (String(repeating: "a", count: 256), "at most 255"), (Array(repeating: "d", count: 2100).joined(separator: "/"), "at most 4096")
        ])
    func refused(_ path: String, _ words: String) {
        guard case .failure(let refusal) = ResourcePath.validate(path) else {
            Issue.record("'\(path.prefix(40))' was accepted")
            return
        }
        #expect(refusal.reason.contains(words), "\(refusal.reason)")
    }

    @Test("ordinary paths are accepted", arguments: ["a", "img/logo.png", "deep/er/still/file.tar.gz", ".hidden", "x/.signet", "ünïcode/データ.txt", "a b/c d"])
    func accepted(_ path: String) {
        #expect((try? ResourcePath.validate(path).get()) == path)
    }

    @Test("invalid UTF-8 in raw entry names is refused")
    func invalidUTF8() {
        guard case .failure(let refusal) = ResourcePath.validate(bytes: [0x61, 0xff, 0x62]) else {
            Issue.record("accepted")
            return
        }
        #expect(refusal.reason.contains("UTF-8"))
    }

    @Test("RFC 3339 UTC timestamps round-trip; anything else is refused")
    func timestamps() {
        let time = Timestamp(rfc3339: "2026-11-22T10:00:00Z")
        #expect(time?.secondsSinceEpoch == 1_795_341_600)
        #expect(time?.rfc3339 == "2026-11-22T10:00:00Z")
        #expect(Timestamp(secondsSinceEpoch: 0).rfc3339 == "1970-01-01T00:00:00Z")
        for bad in [
            "2026-11-22T10:00:00", "2026-11-22 10:00:00Z", "2026-11-22T10:00:00+01:00", "2026-02-30T00:00:00Z",
            "2026-13-01T00:00:00Z", "2026-11-22T24:00:00Z", "2026-11-22T10:00:00.5Z", "x"
        ] {
            #expect(Timestamp(rfc3339: bad) == nil, "\(bad)")
        }
    }

    static func sample() throws -> Manifest {
        Manifest(
            algorithm: .rsaPKCS1v15SHA256, created: Timestamp(rfc3339: "2026-11-22T10:00:00Z")!, expires: nil,
            files: [
                .init(path: "img/logo.png", size: 1234, sha256: String(repeating: "ab", count: 32), mode: .regular),
                .init(path: "run.sh", size: 5, sha256: String(repeating: "01", count: 32), mode: .executable)
            ],
            keyID: try Fixtures.signingKey().keyID, name: "assets", sequence: 42, version: "1.4.2")
    }

    @Test("encoding: sorted keys, expires null, parse gives the same manifest back")
    func roundTrip() throws {
        let manifest = try Self.sample()
        let bytes = try manifest.encoded()
        let text = String(decoding: bytes, as: UTF8.self)
        #expect(text.contains("\"expires\" : null"))
        #expect(text.contains("\"format\" : \"signet/1\""))
        // Keys in sorted order, as FORMAT.md's example shows.
        let keys = ["\"algorithm\"", "\"created\"", "\"expires\"", "\"files\"", "\"format\"", "\"key_id\"", "\"name\"", "\"sequence\"", "\"version\""]
        let positions = keys.map { text.range(of: $0)!.lowerBound }
        #expect(positions == positions.sorted())
        #expect(try Manifest.parse(bytes) == manifest)
        // Python reads it as plain JSON.
        let python = try run("python3", ["-c", "import json,sys; m=json.load(sys.stdin); print(m['files'][1]['mode'], m['sequence'])"], input: Data(bytes))
        #expect(python.stdoutText == "0755 42\n")
    }

    @Test(
        "strict parsing: each defect is named",
        arguments: [
            ("not json", "not JSON"),
            ("{}", "missing"),
            ("FORMAT=signet/2", "signet/2"),
            ("ALG=rsa-md5", "unknown algorithm"),
            ("CREATED=yesterday", "created"),
            ("EXPIRES=2020-01-01T00:00:00Z", "before it was created"),
            ("PATH=../evil", "'..'"),
            ("PATH=img/logo.png", "listed twice"),
            ("MODE=4755", "only 0644 and 0755"),
            ("SHA=XYZ", "sha256"),
            ("SHA=0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A", "sha256"), // uppercase hex
            ("SHA=0g0g0g0g0g0g0g0g0g0g0g0g0g0g0g0g0g0g0g0g0g0g0g0g0g0g0g0g0g0g0g0g", "sha256"), // not hex
            ("KEY=abc", "key_id")
        ])
    func strict(_ mutation: String, _ words: String) throws {
        let good = String(decoding: try Self.sample().encoded(), as: UTF8.self)
        var text: String
        switch mutation {
        case "not json": text = "{\"format\": \"signet/1\", "
        case "{}": text = "{}"
        default:
            let (field, value) = (String(mutation.split(separator: "=")[0]), String(mutation.split(separator: "=", maxSplits: 1)[1]))
            text = good
            switch field {
            case "FORMAT": text = text.replacingOccurrences(of: "\"signet/1\"", with: "\"\(value)\"")
            case "ALG": text = text.replacingOccurrences(of: "\"rsa-pkcs1v15-sha256\"", with: "\"\(value)\"")
            case "CREATED": text = text.replacingOccurrences(of: "\"2026-11-22T10:00:00Z\"", with: "\"\(value)\"")
            case "EXPIRES": text = text.replacingOccurrences(of: "\"expires\" : null", with: "\"expires\" : \"\(value)\"")
            case "PATH": text = text.replacingOccurrences(of: "\"run.sh\"", with: "\"\(value)\"")
            case "MODE": text = text.replacingOccurrences(of: "\"0755\"", with: "\"\(value)\"")
            case "SHA": text = text.replacingOccurrences(of: String(repeating: "01", count: 32), with: value)
            case "KEY": text = text.replacingOccurrences(of: try Fixtures.signingKey().keyID.hex, with: value)
            default: Issue.record("unknown mutation")
            }
            #expect(text != good, "the mutation \(mutation) changed nothing")
        }
        let error = signetError { _ = try Manifest.parse(Array(text.utf8)) }
        #expect(error?.code == .malformedManifest)
        #expect(error?.code.exitStatus.rawValue == 4)
        #expect(error?.reason.contains(words) == true, "\(mutation): \(error?.reason ?? "accepted")")
    }

    @Test(
        "the streaming reader: shapes JSONDecoder refused or ignored keep their outcome, and name the field",
        arguments: [
            // (replace this, with that, words in the error; nil words: accepted as the sample)
            ("\"version\" : \"1.4.2\"", "\"version\" : \"1.4.2\", \"zz\" : {\"a\" : [1, {\"files\" : 2}]}", nil),
            ("\"mode\" : \"0755\",", "\"mode\" : \"0755\", \"extra\" : [[], {}],", nil),
            ("\"size\" : 5", "\"size\" : 18446744073709551616", "whole number"),
            ("\"size\" : 5", "\"size\" : -5", "whole number"),
            ("\"size\" : 5", "\"size\" : \"5\"", "whole number"),
            ("\"size\" : 5", "\"length\" : 5", "files.1.size\" is missing"),
            ("\"path\" : \"run.sh\",", "", "files.1.path\" is missing"),
            ("\"mode\" : \"0755\",", "\"mode\" : 755,", "files.1.mode\" has the wrong type"),
            ("\"sequence\" : 42", "\"sequence\" : \"42\"", "\"sequence\" has the wrong type"),
            ("\"name\" : \"assets\",", "", "\"name\" is missing"),
            ("\"expires\" : null", "\"expires\" : 5", "\"expires\" has the wrong type"),
            ("\"files\" : [", "\"files\" : 5, \"old\" : [", "\"files\" has the wrong type"),
            // A newer format may shape its files differently: its format is what is named.
            ("\"signet/1\"", "\"signet/2\"", "signet/2")
        ])
    func streamingShapes(_ replace: String, _ with: String, _ words: String?) throws {
        let good = String(decoding: try Self.sample().encoded(), as: UTF8.self)
        var text = good.replacingOccurrences(of: replace, with: with)
        if replace.hasPrefix("\"signet/1") { text = text.replacingOccurrences(of: "\"path\" : \"run.sh\",", with: "\"name\" : 5,") }
        #expect(text != good)
        guard let words else {
            #expect(try Manifest.parse(Array(text.utf8)) == Self.sample())
            return
        }
        let error = signetError { _ = try Manifest.parse(Array(text.utf8)) }
        #expect(error?.code == .malformedManifest)
        #expect(error?.reason.contains(words) == true, "\(with): \(error?.reason ?? "accepted")")
    }

    @Test("a file's sha256 is kept as bytes and given back as the same lowercase hex")
    func compactDigest() throws {
        let hex = "00ff" + String(repeating: "0123456789abcdef", count: 3) + "fedcba987654"
        var file = Manifest.File(path: "a", size: 1, sha256: hex, mode: .regular)
        #expect(file.sha256 == hex)
        guard case .bytes = file.content else { Issue.record("not kept as bytes"); return }
        file.sha256 = "not hex" // what a bare package's files carry: kept as given
        #expect(file.sha256 == "not hex")
        let digest = try Digest.compute(Array("abc".utf8), algorithm: .sha256)
        #expect(Manifest.File(path: "a", size: 3, sha256: digest.hex, mode: .regular).content.matches(digest))
        #expect(!Manifest.File(path: "a", size: 3, sha256: hex, mode: .regular).content.matches(digest))
        // Written back digit by digit: the same text as OpenSSL's digest in hex, for any bytes.
        for round in 0..<200 {
            let random = try Digest.compute(Array("round \(round)".utf8), algorithm: .sha256)
            #expect(Manifest.File(path: "a", size: 1, sha256: random.hex, mode: .regular).sha256 == random.hex)
        }
    }

    @Test(
        "user.signet.meta is written directly, byte for byte what JSONEncoder wrote",
        arguments: [
            ("a/b c.txt", "https://example.com/p.zip"), ("q\"uote\\back\u{1}\u{1f}\t\n/é😀", nil)
        ] as [(String, String?)])
    func metadataBytes(_ path: String, _ source: String?) throws {
        struct Meta: Encodable {
            let alg: String; let key_id: String; let name: String?; let path: String; let sequence: UInt64?; let sha256: String; let source: String?
        }
        let key = try Fixtures.signingKey().publicKey
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        for manifest in [try Self.sample(), nil] {
            let expected = try encoder.encode(
                Meta(
                    alg: "rsa-pkcs1v15-sha256", key_id: key.keyID.hex, name: manifest?.name, path: path,
                    sequence: manifest?.sequence, sha256: String(repeating: "ab", count: 32), source: source))
            let written = try SignetMetadata.encode(
                path: path, sha256: String(repeating: "ab", count: 32), signer: key, manifest: manifest,
                algorithm: .rsaPKCS1v15SHA256, source: source)
            #expect(written == Array(expected), "\(String(decoding: written, as: UTF8.self))")
        }
    }

    @Test("paths equal after Unicode normalisation count as duplicates")
    func nfcDuplicates() throws {
        var manifest = try Self.sample()
        manifest.files = [
            .init(path: "caf\u{e9}.txt", size: 1, sha256: String(repeating: "00", count: 32), mode: .regular),
            .init(path: "cafe\u{301}.txt", size: 1, sha256: String(repeating: "00", count: 32), mode: .regular)
        ]
        let error = signetError { _ = try Manifest.parse(try manifest.encoded()) }
        #expect(error?.reason.contains("after Unicode normalisation") == true)
    }

    /// Duplicate detection has a fast path (ASCII paths in byte order need no set of every
    /// path); a repeat must be found in whatever order and wherever it comes.
    @Test(
        "a path listed twice is found in any order, before and after non-ASCII paths",
        arguments: [
            ["a", "a"], ["a", "b", "b"], ["b", "a", "b"], ["a", "b", "c", "a"], ["\u{e9}", "a", "a"],
            ["a", "\u{e9}", "b", "a"], ["a", "b", "\u{e9}", "\u{e9}"], ["z", "y", "x", "z"],
            ["d/x", "d/y", "d/x"], ["a", "b", "cafe\u{301}", "caf\u{e9}"]
        ])
    func duplicatesInAnyOrder(_ paths: [String]) throws {
        var manifest = try Self.sample()
        manifest.files = paths.map { .init(path: $0, size: 1, sha256: String(repeating: "00", count: 32), mode: .regular) }
        let error = signetError { _ = try Manifest.parse(try manifest.encoded()) }
        #expect(error?.reason.contains("listed twice") == true, "\(paths): \(error?.reason ?? "accepted")")
    }

    @Test(
        "distinct paths in any order are accepted, and kept in the manifest's order",
        arguments: [
            ["a", "b", "c"], ["c", "b", "a"], ["a", "\u{e9}", "b"], ["ab", "a", "a/b", "a.b"], ["caf\u{e9}", "cafe"]
        ])
    func distinctInAnyOrder(_ paths: [String]) throws {
        var manifest = try Self.sample()
        manifest.files = paths.map { .init(path: $0, size: 1, sha256: String(repeating: "00", count: 32), mode: .regular) }
        #expect(try Manifest.parse(try manifest.encoded()).files.map(\.path) == paths)
    }

    @Test(
        "an object's keys are compared one by one up to 16, then through a set: repeats found either way",
        arguments: [
            (4, 0, 3), (16, 0, 15), (17, 0, 16), (17, 15, 16), (40, 3, 39), (40, 20, 39), (40, 16, 17)
        ])
    func repeatedKeys(_ count: Int, _ first: Int, _ repeatAt: Int) {
        var keys = (0..<count).map { "k\($0)" }
        keys[repeatAt] = keys[first]
        let text = "{" + keys.map { "\"\($0)\": 1" }.joined(separator: ", ") + "}"
        #expect(throws: (any Error).self, "\(count) keys, \(first) = \(repeatAt)") { try StrictJSON.check(Array(text.utf8)) }
        let distinct = "{" + (0..<count).map { "\"k\($0)\": {\"k\($0)\": 1}" }.joined(separator: ", ") + "}"
        #expect(throws: Never.self) { try StrictJSON.check(Array(distinct.utf8)) }
    }

    @Test(
        "raw entry names and Strings meet the same rules",
        arguments: [
            "a", "\u{80}x", "x\u{9f}", "a\u{a0}b", "\u{e9}t\u{e9}", ".signet", ".signetx/a", "x/.signet/a", "a/..", "..",
            ".", "a/.", "a\u{1b}b", "\u{7f}", "a\\b", "/a", "a//b", String(repeating: "b", count: 255), String(repeating: "b", count: 256),
            "\u{0}", "\u{2028}", "\u{1F600}/x"
        ])
    func bytesAndStringsAgree(_ path: String) {
        let fromString = ResourcePath.validate(path)
        let fromBytes = ResourcePath.validate(bytes: Array(path.utf8))
        #expect(fromString == fromBytes, "\(path.debugDescription)")
        // C1 controls (U+0080...U+009F) are refused; the next character, U+00A0, is not.
        if let scalar = path.unicodeScalars.first(where: { $0.value >= 0x80 && $0.value <= 0xa0 }) {
            #expect((try? fromString.get()) == nil || scalar.value == 0xa0, "\(path.debugDescription)")
        }
    }

    @Test("a sha256 is 64 lowercase hex digits: every other byte in every place is refused")
    func hexEveryPlace() {
        let valid = String(repeating: "0123456789abcdef", count: 4)
        #expect(Manifest.ContentHash(lowercaseHex: valid) != nil)
        #expect(Manifest.ContentHash(lowercaseHex: valid)?.hex == valid)
        for place in [0, 15, 16, 31, 32, 47, 48, 63] {
            for bad in ["g", "A", "F", "/", ":", "`", " ", "\u{0}"] {
                var characters = Array(valid)
                characters[place] = Character(bad)
                #expect(Manifest.ContentHash(lowercaseHex: String(characters)) == nil, "\(bad) at \(place)")
            }
        }
        #expect(Manifest.ContentHash(lowercaseHex: String(valid.dropLast())) == nil)
        #expect(Manifest.ContentHash(lowercaseHex: valid + "0") == nil)
        #expect(Manifest.ContentHash(lowercaseHex: String(valid.dropLast()) + "\u{e9}") == nil)
    }

    /// What Signet 0.x wrote with Foundation's JSONEncoder: the manifest writer must stay
    /// byte-identical to it, or the same inputs would give a different (differently signed) package.
    private struct FoundationShape: Encodable {
        struct Entry: Encodable { let mode: String; let path: String; let sha256: String; let size: UInt64 }
        let manifest: Manifest
        enum Keys: String, CodingKey { case algorithm, created, expires, files, format, key_id, name, sequence, version }
        func encode(to encoder: Encoder) throws {
            var container = encoder.container(keyedBy: Keys.self)
            try container.encode(manifest.algorithm.id, forKey: .algorithm)
            try container.encode(manifest.created.rfc3339, forKey: .created)
            if let expires = manifest.expires { try container.encode(expires.rfc3339, forKey: .expires) } else { try container.encodeNil(forKey: .expires) }
            try container.encode(manifest.files.map { Entry(mode: $0.mode.rawValue, path: $0.path, sha256: $0.sha256, size: $0.size) }, forKey: .files)
            try container.encode(Manifest.format, forKey: .format)
            try container.encode(manifest.keyID.hex, forKey: .key_id)
            try container.encode(manifest.name, forKey: .name)
            try container.encode(manifest.sequence, forKey: .sequence)
            try container.encode(manifest.version, forKey: .version)
        }
    }

    @Test("the manifest writer gives JSONEncoder's exact bytes, escapes and all")
    func sameBytesAsJSONEncoder() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        // Every ASCII byte (controls, quotes, backslash, slash, DEL) and some non-ASCII text.
        let ascii = String(decoding: (0..<128).map { UInt8($0) }, as: UTF8.self)
        let awkward = [ascii, "a/b\\c\"d", "caf\u{e9} \u{2028}\u{2029} \u{feff} 日本 🙂", "", "\u{7f}\u{80}\u{9f}"]
        var manifest = try Self.sample()
        for (index, text) in awkward.enumerated() {
            manifest.name = text
            manifest.version = String(text.reversed())
            manifest.sequence = index == 0 ? UInt64.max : UInt64(index)
            manifest.expires = index.isMultiple(of: 2) ? Timestamp(rfc3339: "2030-01-02T03:04:05Z") : nil
            manifest.files =
                index == 3 ? [] : manifest.files + [.init(path: text, size: UInt64(index) << 40, sha256: String(repeating: "cd", count: 32), mode: .regular)]
            let expected = Array(try encoder.encode(FoundationShape(manifest: manifest))) + [UInt8(ascii: "\n")]
            let actual = try manifest.encoded()
            // Compared as text so a failure shows the two documents, not two byte arrays.
            #expect(String(decoding: actual, as: UTF8.self) == String(decoding: expected, as: UTF8.self), "case \(index)")
        }
    }
}
