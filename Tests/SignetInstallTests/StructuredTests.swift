import Foundation
import Testing
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetManifest
@testable import SignetReverify
@testable import SignetArchive
@testable import SignetNetwork
@testable import SignetPackage
@testable import SignetInstall
import SignetTestSupport
import SignetCryptoTestSupport

@Suite("Structured resources: parsers, key paths, the key comparison and the library API")
struct StructuredTests {
    /// Python's plistlib writes `document` (a Python expression) as XML and as binary.
    static func plists(_ document: String, in directory: TemporaryDirectory) throws -> (xml: [UInt8], binary: [UInt8]) {
        let script =
            "import plistlib, sys, datetime\nd = \(document)\n"
            + "open(sys.argv[1] + '/x.plist', 'wb').write(plistlib.dumps(d))\n"
            + "open(sys.argv[1] + '/b.plist', 'wb').write(plistlib.dumps(d, fmt=plistlib.FMT_BINARY))\n"
        let made = try run("python3", ["-c", script, directory.path])
        guard made.status == 0 else { throw SupportError(made.stderr) }
        return (Array(try contents(directory.file("x.plist"))), Array(try contents(directory.file("b.plist"))))
    }

    @Test("XML and binary forms of one property list read as the same value, every type included")
    func plistForms() throws {
        let directory = try TemporaryDirectory()
        let (xml, binary) = try Self.plists(
            """
            {"s": "ascii", "u": "\\u00fc\\u2192\\u20ac\\U0001d11e", "i": -5, "big": 2**40, "max": 2**63 - 1, "r": 1.5,
             "t": True, "f": False, "date": datetime.datetime(2026, 1, 2, 3, 4, 5), "data": b"\\x00\\x01\\xff",
             "a": [1, "two", {"three": [3]}], "empty": {}, "none": []}
            """, in: directory)
        let fromXML = try StructuredFormat.plist.parse(xml).value
        let fromBinary = try StructuredFormat.plist.parse(binary).value
        #expect(fromXML == fromBinary)
        // The compact forms compare the same way, and key by key nothing differs.
        let compactXML = try StructuredFormat.plist.parse(xml), compactBinary = try StructuredFormat.plist.parse(binary)
        #expect(compactXML.same(0, as: 0, in: compactBinary))
        #expect(StructuredDocument.changes(from: compactXML, to: compactBinary, allowed: []).isEmpty)
        guard case .dictionary(let fields) = fromBinary else { Issue.record("not a dictionary"); return }
        #expect(fields[.init("u")] == .string("ü→€𝄞"))
        #expect(fields[.init("max")] == .number("9223372036854775807"))
        #expect(fields[.init("i")] == .number("-5"))
        #expect(fields[.init("data")] == .data([0, 1, 0xff]))
        #expect(StructuredFormat.detect(xml) == .plist && StructuredFormat.detect(binary) == .plist)
        #expect(StructuredFormat.detect(Array(" {\"a\": 1}".utf8)) == .json)
    }

    @Test("every prefix and many byte flips of a binary property list are refused or read, never a crash")
    func binaryPlistHostile() throws {
        let directory = try TemporaryDirectory()
        let (_, binary) = try Self.plists(#"{"a": [1, 2, {"b": "c" * 40}], "d": 1.25, "e": b"xyz" * 20}"#, in: directory)
        for count in 0..<binary.count { _ = try? StructuredFormat.plist.parse(Array(binary.prefix(count))) }
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<5000 {
            var flipped = binary
            flipped[Int.random(in: 8..<flipped.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
            _ = try? StructuredFormat.plist.parse(flipped)
        }
    }

    /// A binary plist of `objects` (each object's bytes), object 0 on top, 1-byte offsets and refs.
    static func binaryPlist(_ objects: [[UInt8]]) -> [UInt8] {
        var bytes = Array("bplist00".utf8)
        var offsets: [UInt8] = []
        for object in objects {
            offsets.append(UInt8(bytes.count))
            bytes += object
        }
        let table = bytes.count
        bytes += offsets
        bytes += [0, 0, 0, 0, 0, 0, 1, 1]
        for value in [UInt64(objects.count), 0, UInt64(table)] { bytes += withUnsafeBytes(of: value.bigEndian, Array.init) }
        return bytes
    }

    @Test("binary property lists: an object inside itself, an expansion bomb, sets and duplicate keys are refused")
    func binaryPlistRefusals() throws {
        func refusal(_ bytes: [UInt8]) -> String {
            do { _ = try StructuredFormat.plist.parse(bytes); return "parsed" } catch { return "\(error)" }
        }
        // [[...]]: array 0 holds itself.
        #expect(refusal(Self.binaryPlist([[0xA1, 0]])).contains("contains itself"))
        // Ten levels of 15 references each to the next level: 15^10 values from 11 objects.
        let bomb = (0..<10).map { level in [0xAF, 0x10, 15] + [UInt8](repeating: UInt8(level + 1), count: 15) } + [[0x10, 0]]
        #expect(refusal(Self.binaryPlist(bomb)).contains("more than"))
        #expect(refusal(Self.binaryPlist([[0xC1, 1], [0x10, 1]])).contains("sets"))
        // {"a": 1, "a": 2}
        #expect(refusal(Self.binaryPlist([[0xD2, 1, 1, 2, 3], [0x51, 0x61], [0x10, 1], [0x10, 2]])).contains("appears twice"))
        // A reference past the objects, a key that is not a string.
        #expect(refusal(Self.binaryPlist([[0xA1, 9]])).contains("reference"))
        #expect(refusal(Self.binaryPlist([[0xD1, 1, 1], [0x10, 1]])).contains("not a string"))
        #expect(refusal(Self.binaryPlist([[0xD1, 1, 2], [0x51, 0x61], [0x10, 7]])) == "parsed")
    }

    @Test("XML property lists: one value, plist elements only, keys once, no entities")
    func xmlPlistRefusals() throws {
        func refusal(_ body: String) -> String {
            let document = #"<?xml version="1.0" encoding="UTF-8"?><plist version="1.0">"# + body + "</plist>"
            do { _ = try StructuredFormat.plist.parse(Array(document.utf8)); return "parsed" } catch { return "\(error)" }
        }
        #expect(refusal("<dict><key>a</key><string>1</string><key>a</key><string>2</string></dict>").contains("appears twice"))
        #expect(refusal("<dict><key>a</key></dict>").contains("has no value"))
        #expect(refusal("<dict><string>x</string></dict>").contains("must come"))
        #expect(refusal("<string>a</string><string>b</string>").contains("more than one value"))
        #expect(refusal("<set/>").contains("not a property list element"))
        #expect(refusal("text<string>a</string>").contains("text outside"))
        #expect(refusal("<integer>1.5</integer>").contains("not a whole number"))
        #expect(refusal("<date>yesterday</date>").contains("ISO 8601"))
        #expect(refusal("<dict><key>a</key><integer> 0042 </integer><key>b</key><real>2</real></dict>") == "parsed")
        // Foundation's XMLParser traps on an element name that is not UTF-8 (the fuzzer's find):
        // such bytes never reach it; another declared encoding is refused too.
        var broken = Array("<?xml version=\"1.0\"?><plist><dict><key".utf8) + [0xFF, 0xFF, 0x03] + Array(">a</key><true/></dict></plist>".utf8)
        #expect(throws: StructuredValue.ParseError.self) { _ = try StructuredFormat.plist.parse(broken) }
        broken = Array("<?xml version=\"1.0\" encoding='ISO-8859-1'?><plist><string>x</string></plist>".utf8)
        #expect((try? StructuredFormat.plist.parse(broken)) == nil)
        #expect(XMLPropertyList.declaredEncoding(Array("<?xml version=\"1.0\" encoding=\"UTF-8\"?><plist/>".utf8)) == "UTF-8")
        let deep = String(repeating: "<array>", count: 70) + String(repeating: "</array>", count: 70)
        #expect(refusal(deep).contains("nested"))
        // XMLParser crashes on a processing instruction without data (the fuzzer's second find):
        // none reaches it, with or without data, wherever it is; the declaration itself is fine.
        for pi in ["<?pi?>", "<?xm?>", "<?target data?>", "<?xml version=\"1.0\"?>"] {
            #expect(refusal("<array>" + pi + "</array>").contains("processing instruction"), "\(pi)")
            if !pi.hasPrefix("<?xml ") {
                #expect((try? StructuredFormat.plist.parse(Array((pi + "<plist><true/></plist>").utf8))) == nil, "\(pi) first")
            }
        }
        #expect((try? StructuredFormat.plist.parse(Array("<?xml\tversion=\"1.0\"?><plist><true/></plist>".utf8))) != nil)
        #expect((try? StructuredFormat.plist.parse(Array("<plist><true/></plist>".utf8))) != nil)
    }

    @Test("key paths: escapes round-trip, wildcards match one component, bad paths are refused")
    func keyPaths() throws {
        let path = try #require(KeyPath(#"a\.b.*.c\\d.\*"#))
        #expect(path.components == ["a.b", nil, #"c\d"#, "*"])
        #expect(KeyPath(path.description) == path)
        for bad in ["", ".", "a.", ".a", "a..b", "a\\"] { #expect(KeyPath(bad) == nil, "\(bad)") }
        let pattern = try #require(KeyPath("items.*.name"))
        #expect(pattern.covers(try #require(KeyPath("items.3.name"))))
        #expect(pattern.covers(try #require(KeyPath("items.3.name.first"))))
        #expect(!pattern.covers(try #require(KeyPath("items.3"))))
        #expect(!pattern.covers(try #require(KeyPath("items.3.names"))))
    }

    @Test("the comparison: 1 and 1.0 are one number; NFC and NFD strings differ; arrays by index")
    func comparison() throws {
        func changes(_ old: String, _ new: String, allowed: [String] = []) throws -> [String] {
            StructuredValue.changes(
                from: try StructuredValue.json(Array(old.utf8)), to: try StructuredValue.json(Array(new.utf8)),
                allowed: allowed.compactMap(KeyPath.init)
            ).map(\.description)
        }
        #expect(try changes(#"{"a": 1, "b": [1, 2]}"#, #"{"b": [1.0, 2], "a": 1.0}"#) == [])
        #expect(try changes(#"{"s": "caf\u00e9"}"#, #"{"s": "cafe\u0301"}"#) == ["s (changed)"])
        #expect(try changes(#"{"b": [1, 2, 3]}"#, #"{"b": [1, 3]}"#) == ["b.1 (changed)", "b.2 (removed)"])
        #expect(try changes(#"{"a": {"x": 1}}"#, #"{"a": [1]}"#, allowed: ["a.x"]) == ["a (changed)"])
        #expect(try changes(#"{"a": {"x": 1}}"#, #"{"a": {"x": 2, "y": 3}}"#, allowed: ["a"]) == ["a.x (changed, allowed)", "a.y (added, allowed)"])
        #expect(try changes(#"[1]"#, #"{"a.b": 1}"#) == ["(the whole document) (changed)"])
        #expect(try changes(#"{"a.b": 1}"#, #"{"a.b": 2}"#) == [#"a\.b (changed)"#])
        // Numbers by their exact decimal value, never through Double (issue 25).
        #expect(try changes(#"{"n": 9007199254740993}"#, #"{"n": 9007199254740992.0}"#) == ["n (changed)"])
        #expect(try changes(#"{"n": 0.1}"#, #"{"n": 0.10000000000000001}"#) == ["n (changed)"])
        #expect(try changes(#"{"n": 100, "m": 0.5, "z": 0}"#, #"{"n": 1e2, "m": 5E-1, "z": -0.0}"#) == [])
        #expect(try changes(#"{"n": 12345678901234567890123}"#, #"{"n": 12345678901234567890124}"#) == ["n (changed)"])
    }

    @Test("exact decimals: canonical forms, and a binary plist's double equals a decimal only at its exact value")
    func exactNumbers() throws {
        #expect(StructuredValue.canonicalNumber("007") == "7")
        #expect(StructuredValue.canonicalNumber("-1.50e1") == "-15")
        #expect(StructuredValue.canonicalNumber("0.000") == "0")
        #expect(StructuredValue.canonicalNumber("1.25") == "0.125e1")
        #expect(StructuredValue.canonicalNumber("1e99999999999999999") == nil)
        #expect(StructuredValue.canonicalNumber("1e") == nil && StructuredValue.canonicalNumber("abc") == nil)
        #expect(StructuredValue.exactDecimal(0.5) == "0.5e0")
        #expect(StructuredValue.exactDecimal(9_007_199_254_740_992) == "9007199254740992")
        #expect(StructuredValue.exactDecimal(0.1) == StructuredValue.canonicalNumber("0.1000000000000000055511151231257827021181583404541015625"))
        #expect(StructuredValue.exactDecimal(-1e300).map { $0.hasPrefix("-1") } == true)
        #expect(StructuredValue.exactDecimal(5e-324).map { $0.hasSuffix("e-323") } == true)
        #expect(StructuredValue.real(1.5) == .number("0.15e1"))
        #expect(StructuredValue.real(9_007_199_254_740_992) != .number("9007199254740993"))
        #expect(StructuredValue.real(0.1) != .number("0.1e0"), "0.1 is not exactly a double")
    }

    @Test("structured documents are bounded by what they expand to, and large ones parse in linear time")
    func boundedAndLinear() throws {
        // A binary plist whose array refers to one 64 KiB data object 1,100 times: 69 MiB expanded.
        var objects: [[UInt8]] = []
        let references = 1100
        objects.append([0xAF, 0x11] + withUnsafeBytes(of: UInt16(references).bigEndian, Array.init) + [UInt8](repeating: 1, count: references))
        objects.append([0x4F, 0x12] + withUnsafeBytes(of: UInt32(64 * 1024).bigEndian, Array.init) + [UInt8](repeating: 0x41, count: 64 * 1024))
        // Offsets need more than one byte here: write the plist with 4-byte offsets.
        var bytes = Array("bplist00".utf8)
        var offsets: [UInt32] = []
        for object in objects { offsets.append(UInt32(bytes.count)); bytes += object }
        let table = bytes.count
        for offset in offsets { bytes += withUnsafeBytes(of: offset.bigEndian, Array.init) }
        bytes += [0, 0, 0, 0, 0, 0, 4, 1]
        for value in [UInt64(objects.count), 0, UInt64(table)] { bytes += withUnsafeBytes(of: value.bigEndian, Array.init) }
        let refused: String
        do { _ = try StructuredFormat.plist.parse(bytes); refused = "parsed" } catch { refused = "\(error)" }
        #expect(refused.contains("expands to more than"), "\(refused)")

        // 200,000 array items in JSON and in XML: linear (the old builders copied the array on
        // every append). Counted, not timed: the parse must finish and hold every item.
        let json = "[" + (0..<200_000).map { "{\"k\": \($0)}" }.joined(separator: ",") + "]"
        guard case .array(let items) = try StructuredFormat.json.parse(Array(json.utf8)).value else { Issue.record("not an array"); return }
        #expect(items.count == 200_000)
        let xml =
            #"<?xml version="1.0" encoding="UTF-8"?><plist version="1.0"><array>"# + String(repeating: "<integer>7</integer>", count: 200_000)
            + "</array></plist>"
        guard case .array(let plistItems) = try StructuredFormat.plist.parse(Array(xml.utf8)).value else { Issue.record("not an array"); return }
        #expect(plistItems.count == 200_000)

        // An XML property list over 10 MB (up to the 16 MiB limit): libxml2 given it all at once
        // refused it ("huge input lookup"); fed in chunks it parses (issue 36).
        let line = "<string>" + String(repeating: "x", count: 48) + "</string>"
        let large = #"<?xml version="1.0" encoding="UTF-8"?><plist version="1.0"><array>"# + String(repeating: line, count: 230_000) + "</array></plist>"
        #expect(large.utf8.count > 14_000_000 && large.utf8.count < StructuredFormat.maximumSize)
        let parsed = try StructuredFormat.plist.parse(Array(large.utf8))
        #expect(StructuredDocument.changes(from: parsed, to: parsed, allowed: []).isEmpty)
        guard case .array(let largeItems) = parsed.value else { Issue.record("not an array"); return }
        #expect(largeItems.count == 230_000)
    }

    @Test("the library: verifyTree (async) takes the rules and reports each file's changed key paths")
    func libraryRules() async throws {
        let directory = try TemporaryDirectory()
        let root = directory.file("dist")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        try Data(#"{"server": {"url": "https://a.example"}, "mode": "strict"}"#.utf8).write(to: URL(fileURLWithPath: root + "/app.json"))
        var pack = PackOptions(name: "app", version: "1", sequence: 1)
        pack.structured = ["*.json"]
        let result = try PackageBuilder.pack([root], to: directory.file("p.zip"), signer: Signer(key: Fixtures.signingKey()), options: pack)
        #expect(result.manifest.files.map(\.structured) == [.json])
        let target = directory.file("app")
        _ = try Installer.install(directory.file("p.zip"), to: target, policy: Fixtures.trust("rsa2048-spki.der"))
        try Data(#"{"server": {"url": "https://b.example"}, "mode": "strict"}"#.utf8).write(to: URL(fileURLWithPath: target + "/app.json"))

        var rules = ReverifyOptions()
        rules.allow(try #require(KeyPath("server.url")), in: "app.json")
        let report = try await Reverifier.verifyTreeAsync(at: target, policy: Fixtures.trust("rsa2048-spki.der"), options: rules)
        #expect(report.isOK)
        #expect(report.files.first?.changedKeys.map(\.description) == ["server.url (changed, allowed)"])

        let strict = try await Reverifier.verifyTreeAsync(at: target, policy: Fixtures.trust("rsa2048-spki.der"))
        #expect(!strict.isOK)
        #expect(strict.files.first?.changedKeys.map { "\($0.path)" } == ["server.url"])

        var wrong = ReverifyOptions()
        wrong.allow(try #require(KeyPath("server.host")), in: "app.json")
        await #expect(throws: SignetError(.usage, "")) {
            _ = try await Reverifier.verifyTreeAsync(at: target, policy: Fixtures.trust("rsa2048-spki.der"), options: wrong)
        }
        // A rules file read by the library, merged with options.
        try Data(#"{"allow_keys": {"app.json": ["server.url"]}, "exclude": ["*.log"]}"#.utf8).write(to: URL(fileURLWithPath: directory.file("rules.json")))
        var merged = ReverifyOptions()
        merged.merge(try ReverifyOptions(rulesFile: directory.file("rules.json")))
        #expect(merged.exclude == ["*.log"])
        #expect(try await Reverifier.verifyTreeAsync(at: target, policy: Fixtures.trust("rsa2048-spki.der"), options: merged).isOK)
    }
}
