import Foundation
import Testing
import SignetTestSupport

/// The fuzz targets' seed corpus and every input a fuzzer ever crashed on (FuzzCorpus/TARGET),
/// run once through the ordinary build of SignetFuzz: a parser change that crashes on any of
/// them fails here, without a fuzzing toolchain.
@Suite("Fuzz corpus: seeds and past crashes run clean")
struct FuzzCorpusTests {
    static let targets = ["zip", "zip-pipelined", "manifest", "private-key", "public-key", "attributes", "seal", "structured", "tuf-metadata", "multipart"]

    static var corpus: String { Bundle.module.url(forResource: "FuzzCorpus", withExtension: nil)!.path }

    @Test("each target runs its corpus without a crash", arguments: targets)
    func corpusRuns(_ target: String) throws {
        let binary = URL(fileURLWithPath: CLI.binary).deletingLastPathComponent().appendingPathComponent("SignetFuzz").path
        let inputs = try FileManager.default.contentsOfDirectory(atPath: Self.corpus + "/" + target)
        #expect(!inputs.isEmpty, "a seed corpus for \(target)")
        let result = try run(binary, [target, Self.corpus + "/" + target])
        #expect(result.status == 0, "\(target): \(result.status) \(result.stderr.suffix(2000))")
        #expect(result.stdoutText.contains("\(inputs.count) inputs ran without a crash"), "\(result.stdoutText)")
    }
}
