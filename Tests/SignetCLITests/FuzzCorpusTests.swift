import Foundation
import Testing
import SignetTestSupport

/// The fuzz targets' seed corpus and every input a fuzzer ever crashed on (FuzzCorpus/TARGET),
/// run once through the ordinary build of SignetFuzz: a parser change that crashes on any of
/// them fails here, without a fuzzing toolchain.
@Suite("Fuzz corpus: seeds and past crashes run clean")
struct FuzzCorpusTests {
    static var corpus: String { Bundle.module.url(forResource: "FuzzCorpus", withExtension: nil)!.path }
    /// One corpus folder per target: the list is spelled once, in the library's `_FuzzTargets`,
    /// and this folder must match it (``everyTargetHasACorpus()``); .ci/run fuzzes each folder.
    static let targets: [String] = ((try? FileManager.default.contentsOfDirectory(atPath: corpus)) ?? []).sorted()
    static var binary: String { URL(fileURLWithPath: CLI.binary).deletingLastPathComponent().appendingPathComponent("SignetFuzz").path }

    @Test("the corpus folders are exactly the fuzz targets SignetFuzz knows")
    func everyTargetHasACorpus() throws {
        let usage = try run(Self.binary, [])
        #expect(usage.status == 2)
        let listed = try #require(usage.stderr.components(separatedBy: "targets: ").last?.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(Set(listed.components(separatedBy: ", ")) == Set(Self.targets), "SignetFuzz: \(listed); corpus folders: \(Self.targets)")
        #expect(Self.targets.count >= 11)
    }

    @Test("each target runs its corpus without a crash", arguments: targets)
    func corpusRuns(_ target: String) throws {
        let binary = Self.binary
        let inputs = try FileManager.default.contentsOfDirectory(atPath: Self.corpus + "/" + target)
        #expect(!inputs.isEmpty, "a seed corpus for \(target)")
        let result = try run(binary, [target, Self.corpus + "/" + target])
        #expect(result.status == 0, "\(target): \(result.status) \(result.stderr.suffix(2000))")
        #expect(result.stdoutText.contains("\(inputs.count) inputs ran without a crash"), "\(result.stdoutText)")
    }
}
