#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CSignetZlib
internal import SystemPackage
import SignetCore
import SignetArchive

/// Which resources are deflated.
enum CompressionPolicy {
    /// Types that are already compressed: deflating them costs time and gains nothing.
    static let compressedExtensions: Set<String> = [
        "png", "jpg", "jpeg", "gif", "webp", "avif", "heic", "zip", "jar", "apk", "gz", "tgz", "bz2", "xz", "txz",
        "zst", "lz4", "7z", "rar", "mp3", "m4a", "aac", "ogg", "opus", "flac", "mp4", "m4v", "mov", "mkv", "webm",
        "woff", "woff2", "br", "deb", "rpm", "squashfs"
    ]

    /// Bytes looked at to judge compressibility.
    static let sampleSize = 64 * 1024
    /// Above this many bits of entropy per byte, deflate cannot shrink the data in practice.
    static let incompressibleEntropy = 7.95

    static func choose(for input: PackInput, policy: PackOptions.Compression) throws -> ZipCompression {
        guard case .automatic(let level) = policy else { return .store }
        if let dot = input.packagePath.lastIndex(of: "."),
            compressedExtensions.contains(input.packagePath[input.packagePath.index(after: dot)...].lowercased())
        {
            return .store
        }
        // libzip 1.7 keeps deflated data even when it is larger than the input, so judge first:
        // the byte entropy of a sample tells random or already-compressed data from the rest.
        if input.size >= 4096, try entropy(ofPrefixOf: input.diskPath) > incompressibleEntropy {
            return .store
        }
        // A small file is deflated here first, the way libzip would: deflate's own framing
        // makes tiny files larger (a 30-byte text became 32 bytes), and those are stored.
        if input.size < 4096 {
            let bytes = try InputFile.open(input.diskPath, what: "resource").readAll(limit: 4096, what: "resource")
            let deflated = bytes.withUnsafeBufferPointer { signet_raw_deflate_size($0.baseAddress, $0.count, Int32(level)) }
            if deflated < 0 || deflated >= bytes.count { return .store }
        }
        return .deflate(level: UInt32(level))
    }

    /// Shannon entropy (bits per byte) of the first `sampleSize` bytes.
    static func entropy(ofPrefixOf path: String) throws -> Double {
        let file = try InputFile.open(path, what: "resource")
        var counts = [Int](repeating: 0, count: 256)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: sampleSize, alignment: 16)
        defer { buffer.deallocate() }
        let total = try file.read(fullyAt: 0, into: buffer)
        guard total > 0 else { return 0 }
        for byte in UnsafeRawBufferPointer(rebasing: buffer[0..<total]) { counts[Int(byte)] += 1 }
        var entropy = 0.0
        for count in counts where count > 0 {
            let p = Double(count) / Double(total)
            entropy -= p * log2(p)
        }
        return entropy
    }
}
