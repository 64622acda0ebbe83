#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import SystemPackage
internal import CSignetSystem

/// Entry points for the fuzzers (`Fuzz/SignetFuzz`, `scripts/fuzz.sh`): every parser that reads
/// untrusted bytes, each behind a name. Not for applications; underscored so that it stays out
/// of the documented API while the parsers themselves stay internal.
public enum _FuzzTargets {
    /// The target names.
    public static var names: [String] { targets.keys.sorted() }

    /// Runs target `name` on `bytes`. Every outcome but a crash is fine. False for an unknown name.
    public static func run(_ name: String, _ bytes: [UInt8]) -> Bool {
        guard let target = targets[name] else { return false }
        target(bytes)
        return true
    }

    /// Bytes in memory as an archive input (the deflate-segments target's stream).
    private final class MemoryInput: ArchiveInput {
        let bytes: [UInt8]
        init(_ bytes: [UInt8]) { self.bytes = bytes }
        var path: String { "fuzz" }
        var size: Int64 { Int64(bytes.count) }
        func read(fullyAt offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
            guard offset >= 0, offset < size else { return 0 }
            let count = min(buffer.count, bytes.count - Int(offset))
            bytes.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[Int(offset)..<(Int(offset) + count)])) }
            return count
        }
        func directoryRead(_ directory: CentralDirectory.Directory) throws {}
    }

    private static let targets: [String: @Sendable ([UInt8]) -> Void] = [
        // The zip reader: structure checks, libzip's view of each entry, reading every entry,
        // then the package layout and manifest.
        "zip": { bytes in
            guard let path = scratch(bytes) else { return }
            var limits = PackageLimits()
            limits.maxFiles = 64
            limits.maxTotalSize = 1 << 22
            if let reader = try? ZipReader(path: path, maximumEntries: limits.maximumEntries) {
                for entry in reader.entries() { _ = try? reader.read(entry, limit: 1 << 22, name: "entry") { _ in } }
            }
            _ = try? PackageReader.contents(of: path, limits: limits)
        },
        // Entries read and hashed as unpack reads resources, every size sent down the pipelined
        // path (hashed on a second thread), with the reader's sink failing after the number of
        // bytes the first input byte names (x 64; 255: never): a damaged entry, a failing disk
        // or a cancel part-way must release what the hasher holds.
        "zip-pipelined": { bytes in
            guard let first = bytes.first, let path = scratch(Array(bytes.dropFirst())),
                let reader = try? ZipReader(path: path, maximumEntries: 64)
            else { return }
            let failAfter = first == 255 ? Int.max : Int(first) * 64
            struct SinkFailed: Error {}
            PipelinedHasher.$threshold.withValue(0) {
                for entry in reader.entries() {
                    var written = 0
                    _ = try? PackageReader.hashedRead(
                        entry, size: min(entry.size, 1 << 22), name: "entry", reader: reader,
                        algorithms: [.sha256, .sha384]
                    ) { chunk in
                        written += chunk.count
                        if written > failAfter { throw SinkFailed() }
                    }
                }
            }
        },
        // Segments of a deflated chunked resource, as an update inflates them:
        // byte 0 gives the segments (1 to 4), bytes 1-2 the last one's length, then each
        // segment's compressed length (2 bytes), then the stream. A segment must inflate to
        // exactly its length with the bytes before it as the dictionary, whatever the input.
        "deflate-segments": { bytes in
            guard bytes.count >= 3 else { return }
            let count = 1 + Int(bytes[0] % 4)
            let last = 1 + (Int(bytes[1]) << 8 | Int(bytes[2])) % DeflateIndex.segmentSize
            let fileSize = UInt64((count - 1) * DeflateIndex.segmentSize + last)
            guard bytes.count >= 3 + 2 * count else { return }
            var offsets: [UInt64] = [0]
            for index in 0..<count {
                offsets.append(offsets[index] + UInt64(Int(bytes[3 + 2 * index]) << 8 | Int(bytes[4 + 2 * index])))
            }
            let stream = Array(bytes.dropFirst(3 + 2 * count))
            guard offsets[count] <= UInt64(stream.count),
                let segments = DeflatedSegments(input: MemoryInput(stream), data: 0..<offsets[count], offsets: offsets, fileSize: fileSize)
            else { return }
            var file: [UInt8] = []
            for index in 0..<count {
                let start = index * DeflateIndex.segmentSize
                var part = [UInt8](repeating: 0, count: index == count - 1 ? last : DeflateIndex.segmentSize)
                let made = part.withUnsafeMutableBytes { buffer in
                    (try? segments.read(at: UInt64(start), into: buffer) { from, dictionary in
                        guard Int(from) + dictionary.count <= file.count else { return false }
                        file.withUnsafeBytes { dictionary.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[Int(from)..<(Int(from) + dictionary.count)])) }
                        return true
                    }) ?? false
                }
                guard made else { return }
                file += part
            }
        },
        // TUF metadata: the strict reader, each role's shape, a root's own
        // signatures (keys from the input through OpenSSL), delegation matching, the canonical
        // and file forms.
        "tuf-metadata": { bytes in
            for type in ["root", "timestamp", "snapshot", "targets"] {
                guard let metadata = try? TUFMetadata(bytes: bytes, expectedType: type, name: "fuzz") else { continue }
                switch type {
                case "root":
                    if let root = try? TUFRoot(metadata) { try? root.verify(metadata, as: "root", name: "fuzz") }
                case "timestamp":
                    _ = try? TUFTimestamp(metadata)
                case "snapshot":
                    _ = try? TUFSnapshot(metadata)
                default:
                    guard let targets = try? TUFTargets(metadata) else { continue }
                    for path in ["app-1.zip", "a/b/c.txt", "", "bin-00"] {
                        for (role, _) in targets.roles(for: path) { _ = targets.delegation(to: role) }
                    }
                    for target in targets.targets.values { _ = TUFPackageTarget(target) }
                }
            }
            if let document = try? TUFDocument(bytes: bytes, name: "fuzz") { _ = try? TUFJSON.parse(document.bytes) }
        },
        // The manifest parser (strict JSON, then the signet/1 shape).
        "manifest": { bytes in _ = try? Manifest.parse(bytes) },
        // Private keys in every format (no passphrase source: encrypted ones stop at the question).
        "private-key": { bytes in _ = try? PrivateKey(bytes: bytes, allowWeakKey: true) },
        // Public keys and certificates.
        "public-key": { bytes in _ = try? PublicKey(bytes: bytes, allowWeakKey: true) },
        // Attribute values: the IMA v2 signature and user.signet.meta.
        "attributes": { bytes in
            _ = IMASignature(bytes: bytes)
            _ = SignetMetadata(bytes: bytes)
        },
        // The trust seal document.
        "seal": { bytes in _ = TrustStoreSeal.parse(bytes) },
        // Encrypted packages (FORMAT.md §8): the input as a CMS envelope (its structure and
        // recipients), as a chunk-encrypted message under an all-zero key (the commitment, the
        // size arithmetic, each chunk), and as an encrypted package's zip (its two entries).
        "encrypted": { bytes in
            _ = try? CMSEnvelope.summary(of: bytes, name: "envelope")
            _ = try? ChunkedOpener.open(bytes, inputKey: [UInt8](repeating: 0, count: 32), context: Array("signet-encrypted/payload".utf8), name: "payload")
            guard let path = scratch(bytes) else { return }
            _ = try? EncryptedPackage.summary(of: path)
        },
        // A server's answer to a request for several ranges: the first line is the
        // Content-Type (its boundary), the first byte of the rest sets how the body arrives in
        // chunks (1 to 64 bytes), the rest is the body; three ranges of a 200,000-byte file asked.
        "multipart": { bytes in
            guard let newline = bytes.firstIndex(of: 0x0A), newline + 1 < bytes.count else { return }
            let type = String(decoding: bytes[..<newline], as: UTF8.self)
            let step = Int(bytes[newline + 1] % 64) + 1
            let body = Array(bytes[(newline + 2)...])
            let asked: [ClosedRange<Int64>] = [0...9, 100...109, 5000...5009]
            guard var parser = try? MultipartRanges(contentType: type, asked: asked, total: 200_000) else { return }
            var received = 0
            body.withUnsafeBytes { buffer in
                var start = 0
                while start < buffer.count {
                    let end = min(buffer.count, start + step)
                    do {
                        try parser.take(UnsafeRawBufferPointer(rebasing: buffer[start..<end])) { offset, chunk in
                            // Every byte handed on lies inside a range asked (or between two coalesced).
                            precondition(offset >= 0 && offset + Int64(chunk.count) <= 5010)
                            received += chunk.count
                        }
                    } catch { return }
                    start = end
                }
            }
            if (try? parser.finish()) != nil { precondition(received <= 5010 && parser.covered <= asked.count) }
        },
        // A transparency log's texts as a device reads them (c2sp.org): a log proof, the signed
        // note it carries (a fixed log key and cosigner key), the checkpoint inside, the
        // inclusion check; then the same bytes as a note, a checkpoint, a policy and an entry
        // bundle.
        "tlog": { bytes in
            // Keys of Ed25519 seeds 0x42... and 0x43... (the corpus's proof is signed with them).
            let log = try? NoteVerifierKey("example.com/log+d5ca9a19+ASFS+NGbeR0kRTJC4V8uq2y3z/p7al7TAJeWDgaYgdsS")
            let witness = try? NoteVerifierKey("witness.example+444b7fb8+BCL8KXeS8Lb/wL/P237bDAqhTgJaNl7A40Lobjgpy3S2")
            if let proof = try? TransparencyProof(bytes), let log, let witness {
                // The corpus's proof holds: a fuzzer starts from a proof that verifies.
                _ = try? proof.verify(leaf: [UInt8](repeating: 1, count: 32), origin: "example.com/log", log: log, witnesses: [witness], quorum: 1)
                _ = TransparencyProof(extra: proof.extra, index: proof.index, hashes: proof.hashes, checkpoint: proof.checkpoint).bytes
            }
            if let log, let note = try? SignedNote.open(bytes, known: [log]) { _ = try? Checkpoint(text: note.text) }
            if let checkpoint = try? Checkpoint(text: String(decoding: bytes, as: UTF8.self)) {
                precondition((try? Checkpoint(text: checkpoint.text)) == checkpoint)
            }
            _ = try? NoteVerifierKey(String(decoding: bytes.prefix(512), as: UTF8.self))
            // A policy (from root metadata or a file) and its quorum over its own witnesses.
            if let policy = try? TransparencyPolicy(text: String(decoding: bytes, as: UTF8.self)) {
                // Every witness cosigning meets any quorum (a group's k is at most its members).
                precondition(policy.isMet(by: policy.witnesses.map(\.key)))
                precondition(policy.fewestCosigners <= policy.witnesses.count)
            }
            // An entry bundle of a log's tiles.
            _ = try? TransparencyLog.bundleEntries(bytes, count: Int(bytes.first ?? 0), path: "fuzz")
        },
        // Structured resources as reverify reads an edited one: JSON, XML and binary property
        // lists, then the key comparison against itself; and rules-file key paths.
        "structured": { bytes in
            for format in StructuredFormat.allCases {
                if let value = try? format.parse(bytes) {
                    _ = StructuredDocument.changes(from: value, to: StructuredDocument(.null), allowed: [])
                    _ = StructuredDocument.changes(from: value, to: value, allowed: [])
                }
            }
            if let keyPath = KeyPath(String(decoding: bytes.prefix(256), as: UTF8.self)) { _ = KeyPath(keyPath.description) }
        }
    ]

    /// The zip reader reads files: one anonymous memory file per process (`memfd_create`),
    /// rewritten for each input and opened by its /proc path. A named file in /dev/shm was left
    /// behind whenever libFuzzer ended the process at its time limit.
    private static let scratchDescriptor: CInt = signet_memfd("signet-fuzz.zip")

    private static func scratch(_ bytes: [UInt8]) -> String? {
        let fd = FileDescriptor(rawValue: scratchDescriptor)
        guard scratchDescriptor >= 0, ftruncate(scratchDescriptor, 0) == 0,
            (try? fd.writeAll(toAbsoluteOffset: 0, bytes)) != nil
        else { return nil }
        return "/proc/self/fd/\(scratchDescriptor)"
    }
}
