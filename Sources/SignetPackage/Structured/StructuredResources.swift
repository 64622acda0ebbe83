import SignetCore
import SignetCrypto
import SignetManifest
/// The resources `pack --structured GLOB` selects, each parsed before it is packed.
enum StructuredResources {
    /// What pack checked of one structured resource: its format, and the SHA-256 of the bytes
    /// that parsed (the manifest's must be the same: a file changed during pack is refused).
    struct Checked {
        let format: StructuredFormat
        let sha256: String
    }

    /// Parses every input that a pattern selects. A pattern that selects nothing is a usage
    /// error (exit 2); a selected file that does not parse, or is larger than
    /// ``/SignetManifest/StructuredFormat/maximumSize``, is `.malformedStructuredFile` (exit 4).
    static func check(_ inputs: [PackInput], patterns: [String], followSymlinks: Bool) throws -> [Int: Checked] {
        guard !patterns.isEmpty else { return [:] }
        var checked: [Int: Checked] = [:]
        var used = Set<String>()
        for (index, input) in inputs.enumerated() {
            let matching = patterns.filter { ResourcePath.matches(pattern: $0, input.packagePath) }
            guard !matching.isEmpty else { continue }
            used.formUnion(matching)
            guard input.size <= UInt64(StructuredFormat.maximumSize) else {
                throw SignetError(
                    .malformedStructuredFile,
                    "'\(input.diskPath)' is \(input.size) bytes; a --structured file is parsed whole and may be at most \(StructuredFormat.maximumSize) bytes. Leave it out of --structured (\(matching[0]))",
                    path: input.diskPath)
            }
            let bytes = try InputFile.open(input.diskPath, what: "structured resource", followSymlinks: followSymlinks)
                .readAll(limit: StructuredFormat.maximumSize, what: "structured resource")
            let format = StructuredFormat.detect(bytes)
            do {
                _ = try format.parse(bytes)
            } catch let error as StructuredValue.ParseError {
                throw SignetError(
                    .malformedStructuredFile,
                    "'\(input.diskPath)' was selected by --structured '\(matching[0])' but \(error); fix the file or leave it out of --structured",
                    path: input.diskPath)
            }
            checked[index] = Checked(format: format, sha256: try Digest.compute(bytes, algorithm: .sha256).hex)
        }
        if let unused = patterns.first(where: { !used.contains($0) }) {
            throw SignetError(
                .usage,
                "--structured '\(unused)' selects no file being packed; check the pattern (it is matched against paths inside the package, file names and folder names)"
            )
        }
        return checked
    }
}
