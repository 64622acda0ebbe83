import Foundation
import Testing

/// Each library target's `import` lines against the dependencies Package.swift declares for it:
/// nothing imported that is not declared (SwiftPM lets a module reach what another target
/// brings along, so a layer could lean on a neighbour's dependency unseen), and nothing declared
/// that no file imports (a dependency kept by habit links a library the layer does not use).
@Suite("Package.swift: every target imports exactly what it declares")
struct DependencyTests {
    private static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    /// Modules of the platform and the toolchain, never declared.
    private static let platform: Set<String> = [
        "Foundation", "FoundationEssentials", "FoundationXML", "Glibc", "Musl", "Dispatch", "Synchronization", "_Concurrency"
    ]

    /// Each target of Package.swift with the names its `dependencies` list (a product by its
    /// name), for the targets whose sources are under Sources/.
    static func declared() throws -> [String: Set<String>] {
        let manifest = try String(contentsOfFile: root + "/Package.swift", encoding: .utf8)
        var targets: [String: Set<String>] = [:]
        let target = try Regex(#"\.(?:target|executableTarget|testTarget)\(\s*name:\s*"([A-Za-z0-9]+)"(?:,\s*dependencies:\s*\[([^\]]*)\])?"#)
        let name = try Regex(#"\.product\(name:\s*"([A-Za-z0-9]+)"[^)]*\)|"([A-Za-z0-9]+)""#)
        for match in manifest.matches(of: target) {
            guard let targetName = match.output[1].substring.map(String.init) else { continue }
            var dependencies: Set<String> = []
            if let list = match.output[2].substring {
                for dependency in list.matches(of: name) {
                    if let product = dependency.output[1].substring {
                        dependencies.insert(String(product))
                    } else if let plain = dependency.output[2].substring {
                        dependencies.insert(String(plain))
                    }
                }
            }
            targets[targetName] = dependencies
        }
        return targets
    }

    /// The modules the Swift files under Sources/`target` (or `folder`) import.
    static func imported(by target: String, in folder: String = "Sources") throws -> Set<String> {
        let base = root + "/" + folder + "/" + target
        let line = try Regex(#"^(?:@_exported |internal |package |public |@preconcurrency )*import ([A-Za-z0-9_]+)"#).anchorsMatchLineEndings()
        var modules: Set<String> = []
        for path in try #require(FileManager.default.enumerator(atPath: base)).compactMap({ $0 as? String }) where path.hasSuffix(".swift") {
            let text = try String(contentsOfFile: base + "/" + path, encoding: .utf8)
            for match in text.matches(of: line) { modules.insert(String(match.output[1].substring ?? "")) }
        }
        return modules.subtracting(platform)
    }

    @Test("each Swift target under Sources/ imports every dependency it declares, and declares every module it imports")
    func importsMatchDeclarations() throws {
        let declared = try Self.declared()
        let swiftTargets = try FileManager.default.contentsOfDirectory(atPath: Self.root + "/Sources").filter { !$0.hasPrefix("C") }
        #expect(swiftTargets.count >= 10, "\(swiftTargets)")
        for target in swiftTargets.sorted() {
            let declares = try #require(declared[target], "\(target) is not in Package.swift")
            let imports = try Self.imported(by: target)
            #expect(imports.subtracting(declares).isEmpty, "\(target) imports \(imports.subtracting(declares).sorted()) without declaring them")
            #expect(declares.subtracting(imports).isEmpty, "\(target) declares \(declares.subtracting(imports).sorted()) but imports none of them")
        }
    }

    @Test("the network layer knows no package format: it depends on the core and crypto alone (and its C modules)")
    func networkLayer() throws {
        let declared = try #require(try Self.declared()["SignetNetwork"])
        #expect(Set(declared.filter { $0.hasPrefix("Signet") }) == ["SignetCore", "SignetCrypto"], "\(declared.sorted())")
    }

    /// What `target` may reach: its declared dependencies and theirs, down to the bottom.
    static func closure(of target: String, _ declared: [String: Set<String>]) -> Set<String> {
        var seen: Set<String> = []
        var next = declared[target] ?? []
        while let module = next.popFirst() {
            guard seen.insert(module).inserted else { continue }
            next.formUnion(declared[module] ?? [])
        }
        return seen
    }

    @Test("each layer's tests reach only that layer and those below it (and the test support), never a layer above")
    func layerTestsStayInTheirLayer() throws {
        let declared = try Self.declared()
        let layerTests = try FileManager.default.contentsOfDirectory(atPath: Self.root + "/Tests")
            .filter { $0.hasPrefix("Signet") && $0.hasSuffix("Tests") && $0 != "SignetTests" && $0 != "SignetCLITests" }
        #expect(layerTests.count >= 10, "a test target per library layer: \(layerTests.sorted())")
        let testing: Set<String> = ["Testing", "XCTest"]
        for target in layerTests.sorted() {
            let reach = Self.closure(of: target, declared)
            let imports = try Self.imported(by: target, in: "Tests").subtracting(testing)
            #expect(imports.subtracting(reach).isEmpty, "\(target) imports \(imports.subtracting(reach).sorted()), above what it depends on")
            let above = ["SignetInstall", "SignetTUF", "SignetPublish", "SignetUpdate", "Signet"].filter { !reach.contains($0) }
            #expect(imports.isDisjoint(with: above), "\(target) reaches a layer above its own")
        }
        // The core's tests reach the core alone.
        #expect(Set(Self.closure(of: "SignetCoreTests", declared).filter { $0.hasPrefix("Signet") }) == Set(["SignetCore", "SignetTestSupport"]))
    }
}
