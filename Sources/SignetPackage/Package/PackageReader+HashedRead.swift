import SignetCrypto
import SignetArchive
extension PackageReader {
    /// Streams `entry`, which must hold `size` bytes, to `sink` (if given) while hashing it with
    /// each of `algorithms`; large entries are hashed on the second core. Whatever throws part
    /// way (the archive, the sink, a cancel) leaves nothing held: the pipelined hasher gives its
    /// buffers back on every path (the `zip-pipelined` fuzz target drives this).
    package static func hashedRead(
        _ entry: ZipReader.Entry, size: UInt64, name: String, reader: ZipReader, algorithms: [DigestAlgorithm],
        sink: ((UnsafeRawBufferPointer) throws -> Void)?
    ) throws -> [Digest] {
        if size >= PipelinedHasher.threshold {
            // Large: hashed on the second core while this one reads, checks the CRC and writes.
            let hasher = try PipelinedHasher(algorithms)
            try reader.read(entry, limit: size, name: name) { chunk in
                hasher.update(chunk)
                if chunk.count > 0, let sink { try sink(chunk) }
            }
            return try hasher.finalize()
        }
        let hashers = try algorithms.map { try Digest.Hasher($0) }
        try reader.read(entry, limit: size, name: name) { chunk in
            hashers.forEach { $0.update(chunk) }
            if chunk.count > 0, let sink { try sink(chunk) }
        }
        return try hashers.map { try $0.finalize() }
    }
}
