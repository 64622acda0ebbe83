import Foundation
import Testing
import SignetTestSupport

/// Structured resources (issue 16): JSON and property lists packed with --structured, checked key
/// by key after installation. The documents are made and edited by Python (json, plistlib).
@Suite("structured resources: pack --structured, reverify --allow-key / --rules, run as a binary")
struct StructuredCLITests {
    /// Runs a Python snippet with `sys.argv[1]` = the directory; fails loudly.
    static func python(_ code: String, in directory: String) throws {
        let script = "import json, plistlib, sys, os\nd = sys.argv[1]\n" + code
        let result = try SignetTestSupport.run("python3", ["-c", script, directory])
        guard result.status == 0 else { throw SupportError("python3 failed: \(result.stderr)") }
    }

    /// The documents as signed: an XML plist, a binary plist and a JSON file (nested
    /// dictionaries and arrays in each), and a plain file.
    static let signedDocuments = """
        info = {"CFBundleIdentifier": "com.example.app", "CFBundleVersion": "1.0",
                "CFBundleURLTypes": [{"CFBundleURLName": "main", "CFBundleURLSchemes": ["ex", "ex2"]},
                                     {"CFBundleURLName": "alt", "CFBundleURLSchemes": ["alt"]}],
                "Limits": {"max": 5, "ratio": 1.5, "on": True}}
        os.makedirs(d + "/conf", exist_ok=True)
        with open(d + "/Info.plist", "wb") as f: plistlib.dump(info, f)
        with open(d + "/Settings.plist", "wb") as f: plistlib.dump(info, f, fmt=plistlib.FMT_BINARY)
        with open(d + "/conf/app.json", "w") as f:
            json.dump({"server": {"url": "https://a.example", "port": 443}, "serial": "0000",
                       "items": [{"name": "x", "v": 1}, {"name": "y", "v": 2}]}, f)
        with open(d + "/readme.txt", "w") as f: f.write("plain\\n")
        """

    /// Packs the documents (the plists and conf/*.json as structured) and installs them.
    static func install(_ work: Workspace) throws -> String {
        let root = work.directory.file("dist")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        try python(signedDocuments, in: root)
        let package = work.directory.file("app.zip")
        let packed = try CLI.run([
            "pack", root, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app",
            "--version", "1", "--sequence", "1", "--out", package, "--structured", "*.plist", "--structured", "conf/*.json", "--json"
        ])
        #expect(packed.status == 0, "\(packed.stderr)")
        let formats = try #require(try packed.json()["files"] as? [[String: Any]]).map { "\($0["path"]!)=\($0["structured"] as? String ?? "-")" }
        #expect(formats == ["Info.plist=plist", "Settings.plist=plist", "conf/app.json=json", "readme.txt=-"])
        let dest = work.directory.file("opt/app")
        let unpacked = try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER])
        #expect(unpacked.status == 0, "\(unpacked.stderr)")
        return dest
    }

    /// reverify --json: exit status, and per file its verdict and changed keys
    /// ("path:change[:allowed]").
    static func reverify(_ work: Workspace, _ app: String, _ extra: [String] = []) throws -> (Int32, [String: String], [String: [String]]) {
        let result = try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--json"] + extra)
        guard let tree = (try? result.json()["trees"] as? [[String: Any]])?.first, let files = tree["files"] as? [[String: Any]] else {
            return (result.status, [:], [:])
        }
        var verdicts: [String: String] = [:]
        var keys: [String: [String]] = [:]
        for file in files {
            let path = file["path"] as! String
            verdicts[path] = file["verdict"] as? String
            keys[path] = (file["changed_keys"] as? [[String: Any]] ?? []).map {
                "\($0["path"]!):\($0["change"]!)" + (($0["allowed"] as? Bool) == true ? ":allowed" : "")
            }
        }
        return (result.status, verdicts, keys)
    }

    @Test("allowed keys pass with a note; other changes, added and removed keys, and garbage fail and are named")
    func allowedAndRefused() throws {
        let work = try Workspace()
        let app = try Self.install(work)
        // The tree keeps each structured file's signed copy.
        for path in ["Info.plist", "Settings.plist", "conf/app.json"] {
            #expect(try contents(app + "/.signet/structured/" + path) == contents(work.directory.file("dist/" + path)))
        }
        #expect(!FileManager.default.fileExists(atPath: app + "/.signet/structured/readme.txt"))
        #expect(try Self.reverify(work, app).0 == 0)

        // Allowed keys change: an XML plist rewritten as binary, a value in every element of an
        // array of a binary plist, JSON re-indented with a changed and a nested key.
        try Self.python(
            """
            p = plistlib.load(open(d + "/Info.plist", "rb")); p["CFBundleVersion"] = "2.0"
            plistlib.dump(p, open(d + "/Info.plist", "wb"), fmt=plistlib.FMT_BINARY)
            p = plistlib.load(open(d + "/Settings.plist", "rb"))
            for t in p["CFBundleURLTypes"]: t["CFBundleURLName"] = t["CFBundleURLName"] + "-local"
            plistlib.dump(p, open(d + "/Settings.plist", "wb"))
            j = json.load(open(d + "/conf/app.json")); j["server"]["url"] = "https://b.example"; j["serial"] = "1234"
            json.dump(j, open(d + "/conf/app.json", "w"), indent=4)
            """, in: app)
        let allow = [
            "--allow-key", "Info.plist:CFBundleVersion", "--allow-key", "Settings.plist:CFBundleURLTypes.*.CFBundleURLName",
            "--allow-key", "conf/app.json:server.url", "--allow-key", "conf/app.json:serial"
        ]
        let (status, verdicts, keys) = try Self.reverify(work, app, allow)
        #expect(status == 0, "\(verdicts) \(keys)")
        #expect(verdicts == ["Info.plist": "ok", "Settings.plist": "ok", "conf/app.json": "ok", "readme.txt": "ok"])
        #expect(keys["Info.plist"] == ["CFBundleVersion:changed:allowed"])
        #expect(keys["Settings.plist"] == ["CFBundleURLTypes.0.CFBundleURLName:changed:allowed", "CFBundleURLTypes.1.CFBundleURLName:changed:allowed"])
        #expect(keys["conf/app.json"] == ["serial:changed:allowed", "server.url:changed:allowed"])
        let human = try CLI.run(["reverify", app, "--pubkey", work.publicDER] + allow)
        #expect(human.status == 0)
        #expect(human.stdoutText.contains("keys-changed: serial, server.url (allowed)"), "\(human.stdoutText)")

        // Without the rules the same edits are modifications, each key named.
        let (strict, strictVerdicts, strictKeys) = try Self.reverify(work, app)
        #expect(strict == 1)
        #expect(strictVerdicts["conf/app.json"] == "modified")
        #expect(strictKeys["conf/app.json"] == ["serial:changed", "server.url:changed"])
        // Only one element allowed by index: the other is named.
        let (byIndex, _, indexKeys) = try Self.reverify(work, app, ["--allow-key", "Settings.plist:CFBundleURLTypes.0.CFBundleURLName"])
        #expect(byIndex == 1)
        #expect(indexKeys["Settings.plist"] == ["CFBundleURLTypes.0.CFBundleURLName:changed:allowed", "CFBundleURLTypes.1.CFBundleURLName:changed"])

        // Another key beside an allowed one; a key added deep inside; a key removed; a type change.
        try Self.python(
            """
            j = json.load(open(d + "/conf/app.json")); j["server"]["port"] = 8443; j["items"][1]["extra"] = [1]; del j["items"][0]["v"]
            json.dump(j, open(d + "/conf/app.json", "w"))
            p = plistlib.load(open(d + "/Info.plist", "rb")); p["Limits"]["max"] = "5"; p["CFBundleURLTypes"].append({"CFBundleURLName": "new"})
            plistlib.dump(p, open(d + "/Info.plist", "wb"))
            """, in: app)
        let (failed, failedVerdicts, failedKeys) = try Self.reverify(work, app, allow)
        #expect(failed == 1)
        #expect(failedVerdicts["conf/app.json"] == "modified")
        #expect(
            failedKeys["conf/app.json"] == [
                "items.0.v:removed", "items.1.extra:added", "serial:changed:allowed", "server.port:changed", "server.url:changed:allowed"
            ])
        #expect(failedKeys["Info.plist"] == ["CFBundleURLTypes.2:added", "CFBundleVersion:changed:allowed", "Limits.max:changed"])
        let named = try CLI.run(["reverify", app, "--pubkey", work.publicDER] + allow)
        #expect(named.stdoutText.contains("items.0.v (removed)"), "\(named.stdoutText)")
        #expect(named.stdoutText.contains("server.port (changed)"))
        #expect(!named.stdoutText.contains("server.url (changed)"), "allowed keys are not listed as failures")

        // A file that no longer parses; one replaced by garbage.
        try Data("{\"server\": ".utf8).write(to: URL(fileURLWithPath: app + "/conf/app.json"))
        try Data((0..<300).map { UInt8(truncatingIfNeeded: $0 &* 7) }).write(to: URL(fileURLWithPath: app + "/Settings.plist"))
        let garbage = try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--json"] + allow)
        #expect(garbage.status == 1)
        let files = try #require((try garbage.json()["trees"] as? [[String: Any]])?.first?["files"] as? [[String: Any]])
        for path in ["conf/app.json", "Settings.plist"] {
            let entry = try #require(files.first { $0["path"] as? String == path })
            #expect(entry["verdict"] as? String == "modified")
            #expect((entry["detail"] as? String)?.contains("no longer parses") == true, "\(entry)")
        }
    }

    @Test("an edit that a reader would see and the comparison would not is modified: duplicate keys, an altered signed copy")
    func parserDifferentials() throws {
        let work = try Workspace()
        let app = try Self.install(work)
        let allow = ["--allow-key", "conf/app.json:serial", "--allow-key", "Info.plist:CFBundleVersion"]
        // JSON parsers disagree on which of two equal keys counts: the file is refused, not compared.
        try Data(
            #"{"server": {"url": "https://a.example", "port": 443}, "serial": "1", "items": [{"name": "x", "v": 1}, {"name": "y", "v": 2}], "server": {"url": "https://evil.example", "port": 443}}"#
                .utf8
        )
        .write(to: URL(fileURLWithPath: app + "/conf/app.json"))
        // The same in an XML plist: a second CFBundleIdentifier.
        let info = try String(contentsOfFile: app + "/Info.plist", encoding: .utf8)
        try info.replacingOccurrences(
            of: "<key>CFBundleVersion</key>", with: "<key>CFBundleIdentifier</key>\n\t<string>com.evil</string>\n\t<key>CFBundleVersion</key>"
        )
        .write(toFile: app + "/Info.plist", atomically: false, encoding: .utf8)
        let (status, verdicts, _) = try Self.reverify(work, app, allow)
        #expect(status == 1)
        #expect(verdicts["conf/app.json"] == "modified")
        #expect(verdicts["Info.plist"] == "modified")
        let human = try CLI.run(["reverify", app, "--pubkey", work.publicDER] + allow)
        #expect(human.stdoutText.contains("appears twice"), "\(human.stdoutText)")

        // The signed copy is what the comparison trusts only while it matches the manifest.
        let fresh = try Workspace()
        let other = try Self.install(fresh)
        try Self.python(
            """
            j = json.load(open(d + "/conf/app.json")); j["server"]["url"] = "https://evil.example"
            json.dump(j, open(d + "/conf/app.json", "w")); json.dump(j, open(d + "/.signet/structured/conf/app.json", "w"))
            """, in: other)
        let (altered, alteredVerdicts, _) = try Self.reverify(fresh, other, ["--allow-key", "conf/app.json:serial"])
        #expect(altered == 1)
        #expect(alteredVerdicts["conf/app.json"] == "modified")
        let said = try CLI.run(["reverify", other, "--pubkey", fresh.publicDER])
        #expect(said.stdoutText.contains("was altered"), "\(said.stdoutText)")
        // A removed copy: compared byte for byte, so modified.
        try FileManager.default.removeItem(atPath: other + "/.signet/structured/conf/app.json")
        #expect(try Self.reverify(fresh, other).1["conf/app.json"] == "modified")
    }

    @Test("a rules file: exclude, only and allow_keys, combined with options; unknown fields and rules naming nothing are exit 2")
    func rulesFile() throws {
        let work = try Workspace()
        let app = try Self.install(work)
        try Self.python(
            """
            j = json.load(open(d + "/conf/app.json")); j["server"]["url"] = "https://b.example"; j["serial"] = "9"
            json.dump(j, open(d + "/conf/app.json", "w"))
            open(d + "/readme.txt", "a").write("edited\\n")
            """, in: app)
        let rules = try work.directory.write("rules.json", Data(#"{"exclude": ["*.txt"], "allow_keys": {"conf/app.json": ["server.url"]}}"#.utf8))
        // The rules alone leave serial refused; the option adds it.
        let (partial, _, partialKeys) = try Self.reverify(work, app, ["--rules", rules])
        #expect(partial == 1)
        #expect(partialKeys["conf/app.json"] == ["serial:changed", "server.url:changed:allowed"])
        let (combined, verdicts, _) = try Self.reverify(work, app, ["--rules", rules, "--allow-key", "conf/app.json:serial"])
        #expect(combined == 0, "\(verdicts)")
        #expect(verdicts["readme.txt"] == nil, "excluded by the rules file")
        // only: a subtree.
        let onlyConf = try work.directory.write("only.json", Data(#"{"only": ["conf"], "allow_keys": {"conf/app.json": ["server.url", "serial"]}}"#.utf8))
        let (onlyStatus, onlyVerdicts, _) = try Self.reverify(work, app, ["--rules", onlyConf])
        #expect(onlyStatus == 0)
        #expect(Set(onlyVerdicts.keys) == ["conf/app.json"])

        // Every way a rules file or an allowed key can be wrong is exit 2, and says why.
        let wrong: [(String, String)] = [
            (#"{"exclude": ["*.txt"], "allow_key": {}}"#, "allow_key"),
            (#"{"exclude": "*.txt"}"#, "not an array"),
            (#"{"allow_keys": {"conf/app.json": "server.url"}}"#, "not an array"),
            (#"{"allow_keys": {"conf/app.json": ["server..url"]}}"#, "not a key path"),
            (#"["exclude"]"#, "not a JSON object"),
            (#"{"exclude": [], "exclude": ["x"]}"#, "appears twice"),
            (#"{"allow_keys": {"conf/missing.json": ["a"]}}"#, "not in the signed manifest"),
            (#"{"allow_keys": {"readme.txt": ["a"]}}"#, "not packed as structured"),
            (#"{"allow_keys": {"conf/app.json": ["server.host"]}}"#, "names nothing"),
            (#"{"allow_keys": {"conf/app.json": ["items.2.name"]}}"#, "names nothing"),
            (#"{"allow_keys": {"Info.plist": ["CFBundleURLTypes.*.Nope"]}}"#, "names nothing")
        ]
        for (text, said) in wrong {
            let file = try work.directory.write("wrong.json", Data(text.utf8))
            let result = try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--rules", file])
            #expect(result.status == 2, "\(text): \(result.status) \(result.stderr)")
            #expect(result.stderr.contains(said), "\(text): \(result.stderr)")
        }
        for bad in ["conf/app.json", ":server.url", "conf/app.json:", "conf/app.json:a\\"] {
            #expect(try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--allow-key", bad]).status == 2, "\(bad)")
        }
        #expect(try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--rules", work.directory.file("absent.json")]).status == 5)
    }

    @Test("pack: a --structured file that does not parse is exit 4 naming it; a pattern that selects nothing is exit 2")
    func packRefusals() throws {
        let work = try Workspace()
        let key = ["--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app", "--version", "1"]
        let cases: [(String, Data, String)] = [
            ("broken.json", Data(#"{"a": 1,}"#.utf8), "not JSON"),
            ("twice.json", Data(#"{"a": 1, "a": 2}"#.utf8), "appears twice"),
            ("broken.plist", Data("<?xml version=\"1.0\"?><plist><dict><key>a</key></dict></plist>".utf8), "has no value"),
            ("cut.plist", Data("bplist00\u{d1}\u{01}\u{02}".utf8), "binary property list"),
            ("entity.plist", Data("<?xml version=\"1.0\"?><!DOCTYPE plist [<!ENTITY x \"y\">]><plist><string>&x;</string></plist>".utf8), "entity")
        ]
        for (name, bytes, said) in cases {
            let root = work.directory.file("in-" + name)
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
            try bytes.write(to: URL(fileURLWithPath: root + "/" + name))
            let out = work.directory.file(name + ".zip")
            let result = try CLI.run(["pack", root] + key + ["--out", out, "--structured", name])
            #expect(result.status == 4, "\(name): \(result.stderr)")
            #expect(result.stderr.contains(name) && result.stderr.contains(said), "\(name): \(result.stderr)")
            #expect(!FileManager.default.fileExists(atPath: out))
        }
        let root = work.directory.file("fine")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        try Data("{}".utf8).write(to: URL(fileURLWithPath: root + "/a.json"))
        let unused = try CLI.run(["pack", root] + key + ["--out", work.directory.file("u.zip"), "--structured", "*.json", "--structured", "*.plist"])
        #expect(unused.status == 2)
        #expect(unused.stderr.contains("'*.plist' selects no file"), "\(unused.stderr)")
    }
}
