import Foundation
import Testing
import SignetTestSupport

/// The rules of the source tree, checked on every clone: no file over 500 lines, no issue numbers,
/// descriptors typed (no `Int32` descriptor in a signature, no hand-written `close` outside
/// their owner), and docs/ARCHITECTURE.md naming every folder of the library.
@Suite("House rules of the source tree")
struct HouseRulesTests {
    private static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    private func sources() throws -> [(path: String, lines: [Substring])] {
        let base = Self.root + "/Sources"
        let paths = try #require(FileManager.default.enumerator(atPath: base)).compactMap { $0 as? String }.filter { $0.hasSuffix(".swift") }
        #expect(paths.count > 100, "the tree was not found at \(base)")
        return try paths.sorted().map {
            ($0, try String(contentsOfFile: base + "/" + $0, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false))
        }
    }

    @Test("the code follows .swift-format (the toolchain's swift-format, strict: a finding fails)")
    func formatted() throws {
        // The toolchain's own formatter (Swift 6 ships it as `swift format`); the one rule set
        // is .swift-format at the root, which `swift format -i -r Sources Tests Fuzz` applies.
        let result = try run(
            "swift",
            [
                "format", "lint", "--strict", "--configuration", Self.root + "/.swift-format", "-r",
                Self.root + "/Sources", Self.root + "/Tests", Self.root + "/Fuzz", Self.root + "/Package.swift"
            ], timeout: 240)
        #expect(result.status == 0, "swift format lint found:\n\(result.stderr.split(separator: "\n").prefix(20).joined(separator: "\n"))")
    }

    @Test("no source file is over 500 lines")
    func fileLength() throws {
        for file in try sources() {
            #expect(file.lines.count <= 501, "\(file.path) has \(file.lines.count) lines")
        }
    }

    @Test("comments cite the rule (FORMAT.md §, an RFC, the TUF specification), not a tracker's issue numbers: the reader of the code has no tracker")
    func noIssueNumbers() throws {
        let reference = try Regex(#"\b[Ii]ssues? [0-9]+"#)
        for file in try sources() {
            for (number, line) in file.lines.enumerated() where line.contains(reference) {
                Issue.record("\(file.path):\(number + 1) cites an issue number: \(line.trimmingCharacters(in: .whitespaces))")
            }
        }
    }

    @Test("descriptors are FileDescriptor in signatures, and only their owner closes them")
    func typedDescriptors() throws {
        let rawDescriptor = try Regex(#"\b(fd|descriptor|rootFD|root|parent|directory|lock)\s*:\s*(Int32|CInt)\b"#)
        let rawClose = try Regex(#"(^|[^.\w])close\("#)
        // Every library layer (Signet, SignetCore, SignetCrypto...), not the CLI.
        for file in try sources() where file.path.hasPrefix("Signet") {
            for (number, line) in file.lines.enumerated() where !line.trimmingCharacters(in: .whitespaces).hasPrefix("//") {
                let typed = line.firstMatch(of: rawDescriptor) == nil
                #expect(typed, "\(file.path):\(number + 1): \(line)")
                if file.path != "SignetCore/IO/OwnedDescriptor.swift" && !line.contains("func close(") {
                    let closesNothing = line.firstMatch(of: rawClose) == nil
                    #expect(closesNothing, "\(file.path):\(number + 1): \(line)")
                }
            }
        }
    }

    @Test("docs/ARCHITECTURE.md names every library target and every folder of each; a target of one concept has no inner folder")
    func architecturePage() throws {
        let page = try String(contentsOfFile: Self.root + "/docs/ARCHITECTURE.md", encoding: .utf8)
        let layers = try FileManager.default.contentsOfDirectory(atPath: Self.root + "/Sources").filter { $0.hasPrefix("Signet") }
        #expect(layers.count >= 5, "\(layers)")
        for layer in layers {
            #expect(page.contains("| `\(layer)` |"), "ARCHITECTURE.md does not describe the target \(layer)")
            let folders = try FileManager.default.contentsOfDirectory(atPath: Self.root + "/Sources/" + layer).filter {
                !$0.hasSuffix(".swift") && !$0.hasSuffix(".docc")
            }
            // A target of one concept keeps its files at its top (no inner folder named again).
            if folders.isEmpty { #expect(page.contains("`\(layer)/`"), "ARCHITECTURE.md does not describe the folder \(layer)/") }
            for folder in folders { #expect(page.contains("`\(folder)/`"), "ARCHITECTURE.md does not describe \(layer)/\(folder)/") }
        }
    }
}
